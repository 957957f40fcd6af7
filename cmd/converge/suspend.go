package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/converge-dev/converge/status/v1alpha1"
)

const suspendLong = `Suspend sets spec.suspend of a Sync to true, as flux suspend does: the daemon stops
reconciling it (no apply, no drift correction, no prune) until converge resume. Its objects stay
as they are. It prints the Sync as converge status does (-o json|yaml: the Sync object).

A Sync that does not exist is an error with exit code 1; other errors exit 2.`

const resumeLong = `Resume sets spec.suspend of a Sync to false, lifts a rollback pin (spec.rollback, set by
converge rollback, saying so on stderr) and asks the daemon for a reconcile at once, as
converge reconcile does (the converge.dev/requestedAt annotation), then waits until the daemon
handled it and prints the Sync as converge status does (-o json|yaml: the Sync object). With
--wait=false it returns after the change, without asking for a reconcile.

It exits non-zero when the daemon did not handle the request within --timeout or the Sync is
not Ready afterwards; a Sync that does not exist exits 1, other errors 2.`

// suspendOptions are the flags of `converge suspend` and `converge resume`.
type suspendOptions struct {
	kube    *kubeFlags
	output  string
	wait    bool
	timeout time.Duration
}

func newSuspendCommand(kube *kubeFlags) *cobra.Command {
	o := &suspendOptions{kube: kube}
	cmd := syncVerb(kube, "suspend SYNC",
		"Stop reconciling a Sync (spec.suspend=true) until converge resume",
		suspendLong, `  converge suspend -n apps web`,
		func(cmd *cobra.Command, name string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), name, true)
		})
	addRowOutputFlag(cmd, &o.output)
	return cmd
}

func newResumeCommand(kube *kubeFlags) *cobra.Command {
	o := &suspendOptions{kube: kube}
	cmd := syncVerb(kube, "resume SYNC",
		"Reconcile a suspended Sync again (spec.suspend=false) and wait for the result",
		resumeLong, `  converge resume -n apps web`,
		func(cmd *cobra.Command, name string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), name, false)
		})
	addRowOutputFlag(cmd, &o.output)
	cmd.Flags().BoolVar(&o.wait, "wait", true, "ask for a reconcile and wait until the daemon handled it")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 5*time.Minute, "how long to wait for the daemon")
	return cmd
}

// run sets spec.suspend of the Sync name to suspend and prints it; a resume with --wait
// then requests a reconcile and waits for it. A resume that lifts a rollback pin says so on
// errOut, which keeps -o json|yaml parseable.
func (o *suspendOptions) run(ctx context.Context, out, errOut io.Writer, name string, suspend bool) error {
	if err := checkRowFormat(o.output); err != nil {
		return err
	}
	ns := o.kube.namespace()
	api, err := newSyncAPI(o.kube, 0)
	if err != nil {
		return err
	}
	before, err := getSync(ctx, api, ns, name)
	if err != nil {
		return err
	}
	patch := fmt.Appendf(nil, `{"spec":{"suspend":%t}}`, suspend)
	if !suspend {
		patch = []byte(`{"spec":{"suspend":false,"rollback":null}}`) // resume lifts a rollback pin too
	}
	obj, err := api.syncs.Namespace(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return explainSyncs(err, fmt.Sprintf("sync %s/%s: set spec.suspend=%t", ns, name, suspend))
	}
	if rb := before.Spec.Rollback; !suspend && rb != nil {
		fmt.Fprintf(errOut, "sync %s/%s: lifted the rollback pin to %s (spec.rollback): the source's head is applied again\n", ns, name, rb.Revision)
	}
	syncs, err := typedSyncs([]unstructured.Unstructured{*obj})
	if err != nil {
		return err
	}
	s, waitErr := &syncs[0], error(nil)
	if !suspend && o.wait {
		c, err := o.kube.syncClient()
		if err != nil {
			return err
		}
		var got *v1alpha1.Sync
		if got, waitErr = requestReconcile(ctx, c, types.NamespacedName{Namespace: ns, Name: name}, o.timeout); got != nil {
			s = got
		}
	}
	if o.output != "table" {
		return errors.Join(waitErr, writeStructured(out, s, o.output)) // the object, as kubectl get NAME
	}
	return errors.Join(waitErr, printSyncs(out, []v1alpha1.Sync{*s}, statusView{}))
}
