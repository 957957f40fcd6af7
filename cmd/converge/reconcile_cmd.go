package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// The `reconcile` verb asks the daemon for a reconcile; the daemon's reconciler is
// daemon/reconciler.go.

func newReconcileCommand(kube *kubeFlags) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "reconcile NAME",
		Short: "Ask the daemon to reconcile a Sync now and wait for the result",
		Long: `Reconcile sets the converge.dev/requestedAt annotation of the Sync to the current time
and waits until the daemon reports it handled that request (status.lastHandledRequest), then
prints the Sync. It exits non-zero when the Sync is not Ready afterwards.`,
		Example:           `  converge reconcile -n apps web`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeSyncNames(kube, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := kube.syncClient()
			if err != nil {
				return err
			}
			key := client.ObjectKey{Namespace: kube.namespace(), Name: args[0]}
			s, err := requestReconcile(cmd.Context(), c, key, timeout)
			if s != nil {
				err = errors.Join(err, printSyncs(cmd.OutOrStdout(), []v1alpha1.Sync{*s}, statusView{Now: time.Now()}))
			}
			return err
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long to wait for the daemon")
	return cmd
}

// requestReconcile annotates key and waits until the daemon handled the request.
func requestReconcile(ctx context.Context, c client.Client, key client.ObjectKey, timeout time.Duration) (*v1alpha1.Sync, error) {
	s := &v1alpha1.Sync{}
	if err := c.Get(ctx, key, s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("sync %s not found; converge status -n %s lists the Syncs of %[2]s (-A of every namespace)", key, key.Namespace)
		}
		return nil, explain(fmt.Errorf("sync %s: %w", key, err), nil)
	}
	if s.Spec.Suspend {
		return s, fmt.Errorf("sync %s is suspended: set spec.suspend=false first", key)
	}
	// No UID in the patch: the CLI asks for whatever Sync has that name now.
	requested, patch, err := v1alpha1.ReconcileRequest("", time.Now())
	if err != nil {
		return nil, err
	}
	if err := c.Patch(ctx, s, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return nil, fmt.Errorf("sync %s: request reconcile: %w", key, err)
	}
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, s); err != nil {
			return false, nil
		}
		return s.Status.LastHandledRequest == requested, nil
	})
	if err != nil {
		return s, fmt.Errorf("sync %s: the daemon did not handle the request within %s (is `converge run` running?)", key, timeout)
	}
	if !meta.IsStatusConditionTrue(s.Status.Conditions, v1alpha1.ConditionReady) {
		return s, errors.New("reconciled, but the Sync is not Ready")
	}
	return s, nil
}
