package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/inventory"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// uninstallFlags are the flags of "converge uninstall".
type uninstallFlags struct {
	yes     bool
	timeout time.Duration
}

const uninstallWarning = `WARNING: converge uninstall removes the daemon and everything "converge install" applied:
  1. the Deployment converge-system/converge, first, and waits for its pods to stop, so no
     daemon acts during the rest;
  2. the finalizer converge.dev/finalizer from every Sync (%s), so that
  3. deleting the CRD syncs.converge.dev does not hang: it deletes EVERY Sync in the cluster;
  4. the RBAC (ClusterRoles converge and converge-apply, their bindings, the ServiceAccount),
     the metrics Service, and last the namespace converge-system.
Objects that Syncs applied are ORPHANED, NOT DELETED: the deletionPolicy of a Sync is carried
out by the daemon, which is gone, so those objects stay as they are, together with each Sync's
inventory ConfigMap (<sync>-inventory in the Sync's namespace). To delete them instead, delete
the Syncs (deletionPolicy: Delete) and wait until they are gone BEFORE you uninstall.
ClusterRoles you labelled rbac.converge.dev/aggregate-to-apply are not part of the base and stay.
`

func newUninstallCommand(kube *kubeFlags) *cobra.Command {
	var f uninstallFlags
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "Remove what \"converge install\" installed; objects applied by Syncs are orphaned",
		Long: fmt.Sprintf(uninstallWarning, "in every namespace") + `
It asks for confirmation on a terminal; elsewhere it needs --yes. A daemon running outside the
cluster (converge run on a laptop) must be stopped first: it would put the finalizers back.`,
		Example: `  converge uninstall          # shows the warning and asks
  converge uninstall --yes    # scripts`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return f.run(cmd, kube) },
	}
	cmd.Flags().BoolVar(&f.yes, "yes", false, "do not ask for confirmation")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 2*time.Minute, "how long to wait for the daemon's pods and the CRD to go")
	return cmd
}

// errNotConfirmed is an uninstall that was refused or not confirmed.
var errNotConfirmed = errors.New("uninstall not confirmed: nothing was removed")

func (f *uninstallFlags) run(cmd *cobra.Command, kube *kubeFlags) error {
	fail := func(err error) error { return &exitError{code: exitCodeError, err: err} }
	stderr := cmd.ErrOrStderr()
	if !f.yes && !isTerminal(cmd.InOrStdin()) {
		fmt.Fprintf(stderr, uninstallWarning, "in every namespace")
		return fail(fmt.Errorf("%w; stdin is not a terminal, so re-run with --yes once you have read the warning above", errNotConfirmed))
	}
	ctx := cmd.Context()
	c, eng, err := kube.clientAndEngine()
	if err != nil {
		return fail(err)
	}
	// Read only until confirmed: under a legacy ID until uninstall migrates it.
	mopts := inventory.DefaultMigrateOptions()
	mopts.DryRun = true
	ref, err := eng.Migrate(ctx, installRef, mopts)
	if err != nil {
		return fail(err)
	}
	inv, err := eng.Inventory(ctx, ref)
	if err != nil {
		return fail(err)
	}
	if inv.Len() == 0 {
		return fail(fmt.Errorf("nothing to uninstall: there is no inventory %s; a base applied with kubectl apply -k is removed with kubectl delete -k (docs/deploy.md)", installRef))
	}
	syncs, err := listSyncs(ctx, c)
	if err != nil {
		return fail(err)
	}
	fmt.Fprintf(stderr, uninstallWarning, describeSyncs(syncs))
	if !f.yes && !confirm(cmd.InOrStdin(), stderr) {
		return fail(errNotConfirmed)
	}
	res, uninstallErr := uninstall(ctx, c, eng, f.timeout)
	if err := newReport(baseRevision(), false, res, uninstallErr).write(cmd.OutOrStdout(), ""); err != nil {
		return fail(err)
	}
	if uninstallErr != nil {
		return fail(uninstallErr)
	}
	fmt.Fprintln(cmd.OutOrStdout(), "Uninstalled. Objects applied by Syncs, and their <sync>-inventory ConfigMaps, were left in place (orphaned).")
	return nil
}

// uninstall stops the daemon, releases every Sync, deletes the install inventory with the
// engine, and deletes the namespace the inventory lived in last.
func uninstall(ctx context.Context, c client.Client, eng *engine.Engine, timeout time.Duration) (*engine.Result, error) {
	if _, err := eng.Migrate(ctx, installRef, inventory.DefaultMigrateOptions()); err != nil {
		return nil, err
	}
	stopped, err := stopDaemon(ctx, c, timeout)
	if err != nil {
		return nil, err
	}
	if err := releaseSyncs(ctx, c); err != nil {
		return nil, err
	}
	// The inventory lives in converge-system: keep the engine from deleting the namespace
	// under it (it records every stage there); it is deleted below, once the inventory is gone.
	ns, err := keepNamespace(ctx, c)
	if err != nil {
		return nil, err
	}
	res, err := eng.Delete(ctx, installRef, engine.DefaultDeleteOptions())
	if stopped {
		setAction(res.Pruned, "Deployment", installNamespace, daemonName, engine.ActionPruned, "deleted first")
	}
	if err != nil {
		return res, err
	}
	if err := waitCRDGone(ctx, c, timeout); err != nil {
		return res, err
	}
	if ns != nil {
		uid := ns.GetUID()
		err := c.Delete(ctx, ns, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
		if err != nil && !apierrors.IsNotFound(err) {
			return res, fmt.Errorf("namespace %s: delete: %w", installNamespace, err)
		}
		setAction(res.Pruned, "Namespace", "", installNamespace, engine.ActionPruned, "deleted last")
	}
	return res, nil
}

// stopDaemon deletes the daemon's Deployment, if the install owns it, and waits until none
// of its pods is left. It reports whether it deleted the Deployment.
func stopDaemon(ctx context.Context, c client.Client, timeout time.Duration) (bool, error) {
	d := &appsv1.Deployment{}
	err := c.Get(ctx, client.ObjectKey{Namespace: installNamespace, Name: daemonName}, d)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("deployment %s/%s: %w", installNamespace, daemonName, err)
	}
	if owner := d.Annotations[engine.OwnerAnnotation]; owner != installRef.ID {
		by := "nobody"
		if owner != "" {
			by = inventory.Describe(owner)
		}
		return false, fmt.Errorf("the Deployment %s/%s is owned by %s, not by converge install: stop that daemon yourself before uninstalling",
			installNamespace, daemonName, by)
	}
	uid := d.UID
	err = c.Delete(ctx, d, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if err != nil && !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("deployment %s/%s: delete: %w", installNamespace, daemonName, err)
	}
	var selector client.MatchingLabels
	if d.Spec.Selector != nil {
		selector = d.Spec.Selector.MatchLabels
	}
	pods := &corev1.PodList{}
	err = wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		if err := c.List(ctx, pods, client.InNamespace(installNamespace), selector); err != nil {
			return false, nil
		}
		return len(pods.Items) == 0, nil
	})
	if err != nil {
		return true, fmt.Errorf("the daemon's pods did not stop within %s (%d left): nothing else was removed; run uninstall again: %w", timeout, len(pods.Items), err)
	}
	return true, nil
}

// listSyncs lists every Sync; none when the CRD is not installed.
func listSyncs(ctx context.Context, c client.Client) ([]v1alpha1.Sync, error) {
	list := &v1alpha1.SyncList{}
	err := c.List(ctx, list)
	if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list syncs: %w", err)
	}
	return list.Items, nil
}

func describeSyncs(syncs []v1alpha1.Sync) string {
	namespaces := map[string]bool{}
	for _, s := range syncs {
		namespaces[s.Namespace] = true
	}
	return fmt.Sprintf("now %d Syncs in %d namespaces", len(syncs), len(namespaces))
}

// releaseSyncs removes the converge.dev/finalizer from every Sync, with an optimistic lock
// and a fresh read on every conflict.
func releaseSyncs(ctx context.Context, c client.Client) error {
	syncs, err := listSyncs(ctx, c)
	if err != nil {
		return err
	}
	var errs []error
	for _, s := range syncs {
		key := client.ObjectKeyFromObject(&s)
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur := &v1alpha1.Sync{}
			if err := c.Get(ctx, key, cur); err != nil {
				return err
			}
			if !controllerutil.ContainsFinalizer(cur, v1alpha1.Finalizer) {
				return nil
			}
			base := cur.DeepCopy()
			controllerutil.RemoveFinalizer(cur, v1alpha1.Finalizer)
			return c.Patch(ctx, cur, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
		})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("sync %s: remove finalizer: %w", key, err))
		}
	}
	return errors.Join(errs...)
}

// keepNamespace marks the install namespace, if the install owns it, so the engine's Delete
// leaves it (and drops it from the inventory). It returns the namespace to delete last.
func keepNamespace(ctx context.Context, c client.Client) (*corev1.Namespace, error) {
	ns := &corev1.Namespace{}
	err := c.Get(ctx, client.ObjectKey{Name: installNamespace}, ns)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("namespace %s: %w", installNamespace, err)
	}
	if ns.Annotations[engine.OwnerAnnotation] != installRef.ID {
		return nil, nil
	}
	if ns.Annotations[engine.PruneAnnotation] == engine.PruneDisabled {
		return ns, nil
	}
	objs, err := renderBase(ctx, "")
	if err != nil {
		return nil, err
	}
	// The base's Namespace, applied with the engine's field manager, plus the mark: the
	// next "converge install" drops the mark again.
	u, err := baseNamespace(objs)
	if err != nil {
		return nil, err
	}
	setAnnotation(u, engine.PruneAnnotation, engine.PruneDisabled)
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(engine.FieldManager)); err != nil {
		return nil, fmt.Errorf("namespace %s: mark: %w", installNamespace, err)
	}
	return ns, nil
}

// waitCRDGone deletes the Sync CRD if it is still there (its owner annotation may have been
// dropped by a daemon that installs the CRD itself) and waits until the API server has
// deleted every Sync and the CRD.
func waitCRDGone(ctx context.Context, c client.Client, timeout time.Duration) error {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	err := c.Get(ctx, client.ObjectKey{Name: syncCRDName}, crd)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("crd %s: %w", syncCRDName, err)
	}
	if crd.DeletionTimestamp.IsZero() {
		uid := crd.UID
		if err := c.Delete(ctx, crd, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("crd %s: delete: %w", syncCRDName, err)
		}
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKey{Name: syncCRDName}, &apiextensionsv1.CustomResourceDefinition{})
		return apierrors.IsNotFound(err), nil
	})
	if err == nil {
		return nil
	}
	held := 0
	if syncs, lerr := listSyncs(ctx, c); lerr == nil {
		for _, s := range syncs {
			if controllerutil.ContainsFinalizer(&s, v1alpha1.Finalizer) {
				held++
			}
		}
	}
	return fmt.Errorf("crd %s still terminating after %s; %d Syncs carry %s again (is a daemon still running elsewhere?): %w",
		syncCRDName, timeout, held, v1alpha1.Finalizer, err)
}

// confirm asks on w and reads one line from r; only "yes" confirms.
func confirm(r io.Reader, w io.Writer) bool {
	fmt.Fprint(w, `Type "yes" to uninstall: `)
	line, _ := bufio.NewReader(r).ReadString('\n')
	return strings.TrimSpace(line) == "yes"
}
