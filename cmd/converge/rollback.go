package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/converge-dev/converge/status/v1alpha1"
)

const rollbackLong = `Pin a Sync to an earlier revision of its source while GitOps stays on: the daemon applies
that revision (and prunes what it does not declare, within spec.pruneBudget), corrects drift
and reports as usual, with Ready reason RolledBack and status.rolledBack naming the revision
it does not apply. The pin is spec.rollback, visible in the Sync and reviewable like any
spec change.

Without --to, the revision is the one the Sync is rolled back to already (status.rolledBack),
else the newest one status.history recorded as Ready other than the one it attempts now. A git source is pinned to a commit ("main@sha1:<commit>"), an
OCI source to a digest ("v1@sha256:<digest>"); a Helm repository chart is pinned by its
version in spec.source instead.

The pin holds until converge resume removes it, or, with --until-new-revision, until the
source has a revision other than the one it is at now. A rollback that would delete a CRD
the Sync applies is refused by the daemon (reason RollbackRefused).

spec.autoRollback: true makes the daemon roll back by itself when a new revision fails its
health checks within spec.timeout.`

// rollbackOptions are the flags of `converge rollback`.
type rollbackOptions struct {
	kube   *kubeFlags
	to     string
	until  bool
	output string
}

func newRollbackCommand(kube *kubeFlags) *cobra.Command {
	o := &rollbackOptions{kube: kube}
	cmd := syncVerb(kube, "rollback SYNC",
		"Pin a Sync to an earlier revision (the last Ready one by default) while reconciles go on",
		rollbackLong, `  converge rollback -n apps web
  converge rollback -n apps web --to main@sha1:3f2a…  --until-new-revision
  converge resume -n apps web     # lift the pin`,
		func(cmd *cobra.Command, name string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout(), name)
		})
	cmd.Flags().StringVar(&o.to, "to", "", "the revision to apply, as status.history names it (default: the last Ready revision before the current one)")
	cmd.Flags().BoolVar(&o.until, "until-new-revision", false, "lift the pin when the source has a new revision, instead of at converge resume")
	addRowOutputFlag(cmd, &o.output)
	return cmd
}

// run pins the Sync name (spec.rollback) and says so, or prints the pinned Sync with -o
// json|yaml, as kubectl get NAME does.
func (o *rollbackOptions) run(ctx context.Context, out io.Writer, name string) error {
	if err := checkRowFormat(o.output); err != nil {
		return err
	}
	ns := o.kube.namespace()
	api, s, err := readSync(ctx, o.kube, name)
	if err != nil {
		return err
	}
	from := s.Status.LastAttemptedRevision
	if rb := s.Status.RolledBack; rb != nil && rb.From != "" {
		from = rb.From // already rolled back: the head is what it does not apply
	}
	to := o.to
	if rb := s.Status.RolledBack; to == "" && rb != nil && rb.To != "" {
		to = rb.To // already rolled back (automatically, say): pinned where it is, not further
	}
	if to == "" {
		if to = lastReady(s.Status.History, s.Status.LastAttemptedRevision); to == "" {
			return &exitError{code: 1, err: fmt.Errorf("sync %s/%s: status.history records no Ready revision other than %q; name one with --to", ns, name, s.Status.LastAttemptedRevision)}
		}
	}
	rb := v1alpha1.Rollback{Revision: to, Until: v1alpha1.RollbackUntilResume}
	if o.until {
		if from == "" {
			return &exitError{code: 1, err: errors.New("--until-new-revision: the Sync has attempted no revision yet to compare with")}
		}
		rb.Until, rb.From = v1alpha1.RollbackUntilNewRevision, from
	}
	// The UID makes the patch fail on a Sync deleted and re-created since it was read.
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": s.UID}, "spec": map[string]any{"rollback": rb}})
	if err != nil {
		return err
	}
	obj, err := api.syncs.Namespace(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "converge-cli"})
	if err != nil {
		return explainSyncs(err, "patch sync "+ns+"/"+name)
	}
	if o.output != "table" {
		syncs, err := typedSyncs([]unstructured.Unstructured{*obj})
		if err != nil {
			return err
		}
		return writeStructured(out, &syncs[0], o.output)
	}
	lift := "converge resume -n " + ns + " " + name + " lifts it"
	if o.until {
		lift = "the source's next revision lifts it (or converge resume)"
	}
	_, err = fmt.Fprintf(out, "sync %s/%s pinned to %s (its source is at %s); %s\n", ns, name, to, orNone(from), lift)
	return err
}

// lastReady is the revision of the newest Ready entry of history other than current.
func lastReady(history []v1alpha1.HistoryEntry, current string) string {
	for _, h := range history { // newest first
		if h.Ready == metav1.ConditionTrue && h.Revision != "" && h.Revision != current {
			return h.Revision
		}
	}
	return ""
}

func orNone(s string) string {
	if s == "" {
		return "no revision yet"
	}
	return s
}
