package installer

import (
	"context"
	"errors"
	"fmt"
	"time"

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

// Uninstall stops the daemon, releases every Sync, deletes the install inventory with the
// engine, and deletes the namespace the inventory lived in last.
func Uninstall(ctx context.Context, c client.Client, eng *engine.Engine, timeout time.Duration) (*engine.Result, error) {
	if _, err := eng.Migrate(ctx, Ref, inventory.DefaultMigrateOptions()); err != nil {
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
	res, err := DeleteInventory(ctx, eng, Ref)
	if stopped {
		SetAction(res.Pruned, "Deployment", Namespace, DaemonName, engine.ActionPruned, "deleted first")
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
			return res, fmt.Errorf("namespace %s: delete: %w", Namespace, err)
		}
		SetAction(res.Pruned, "Namespace", "", Namespace, engine.ActionPruned, "deleted last")
	}
	return res, nil
}

// deleteAttempts bounds DeleteInventory's reads of an inventory that keeps changing.
const deleteAttempts = 5

// DeleteInventory deletes the objects of the inventory ref, then the inventory
// (engine.Delete). When another writer changes the inventory meanwhile (an object created
// under it: engine.ErrInventoryChanged), it reads the inventory again and
// deletes what it lists now, up to deleteAttempts times, as the daemon's finalizer does by
// requeueing: an uninstall is not left half done for a race a second read settles. The
// inventory stays until a Delete of all it lists succeeds, so nothing created under it is
// left unlisted (I2). The result lists each object once, with its first deletion.
func DeleteInventory(ctx context.Context, eng *engine.Engine, ref inventory.Ref) (*engine.Result, error) {
	all := &engine.Result{}
	seen := map[string]int{} // Change.ID → index in all.Pruned
	for attempt := 1; ; attempt++ {
		res, err := eng.Delete(ctx, ref, engine.DefaultDeleteOptions())
		for _, c := range res.Pruned {
			i, ok := seen[c.ID]
			switch {
			case !ok:
				seen[c.ID] = len(all.Pruned)
				all.Pruned = append(all.Pruned, c)
			case c.Action != engine.ActionSkipped || all.Pruned[i].Action != engine.ActionPruned:
				all.Pruned[i] = c // a retry's "already deleted" keeps the deletion it follows
			}
		}
		if err == nil || !errors.Is(err, engine.ErrInventoryChanged) {
			return all, err
		}
		if attempt == deleteAttempts {
			return all, fmt.Errorf("inventory %s changed during each of %d deletes: %w", ref, attempt, err)
		}
	}
}

// stopDaemon deletes the daemon's Deployment, if the install owns it, and waits until none
// of its pods is left. It reports whether it deleted the Deployment.
func stopDaemon(ctx context.Context, c client.Client, timeout time.Duration) (bool, error) {
	d := &appsv1.Deployment{}
	err := c.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: DaemonName}, d)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("deployment %s/%s: %w", Namespace, DaemonName, err)
	}
	if owner := d.Annotations[engine.OwnerAnnotation]; owner != Ref.ID {
		by := "nobody"
		if owner != "" {
			by = inventory.Describe(owner)
		}
		return false, fmt.Errorf("the Deployment %s/%s is owned by %s, not by converge install: stop that daemon yourself before uninstalling",
			Namespace, DaemonName, by)
	}
	uid := d.UID
	err = c.Delete(ctx, d, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if err != nil && !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("deployment %s/%s: delete: %w", Namespace, DaemonName, err)
	}
	var selector client.MatchingLabels
	if d.Spec.Selector != nil {
		selector = d.Spec.Selector.MatchLabels
	}
	pods := &corev1.PodList{}
	err = wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		if err := c.List(ctx, pods, client.InNamespace(Namespace), selector); err != nil {
			return false, nil
		}
		return len(pods.Items) == 0, nil
	})
	if err != nil {
		return true, fmt.Errorf("the daemon's pods did not stop within %s (%d left): nothing else was removed; run Uninstall again: %w", timeout, len(pods.Items), err)
	}
	return true, nil
}

// ListSyncs lists every Sync; none when the CRD is not installed.
func ListSyncs(ctx context.Context, c client.Client) ([]v1alpha1.Sync, error) {
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

// DescribeSyncs names the Syncs an uninstall would release, for its warning.
func DescribeSyncs(syncs []v1alpha1.Sync) string {
	namespaces := map[string]bool{}
	for _, s := range syncs {
		namespaces[s.Namespace] = true
	}
	return fmt.Sprintf("now %d Syncs in %d namespaces", len(syncs), len(namespaces))
}

// releaseSyncs removes the converge.dev/finalizer from every Sync, with an optimistic lock
// and a fresh read on every conflict.
func releaseSyncs(ctx context.Context, c client.Client) error {
	syncs, err := ListSyncs(ctx, c)
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
	err := c.Get(ctx, client.ObjectKey{Name: Namespace}, ns)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("namespace %s: %w", Namespace, err)
	}
	if ns.Annotations[engine.OwnerAnnotation] != Ref.ID {
		return nil, nil
	}
	if ns.Annotations[engine.PruneAnnotation] == engine.PruneDisabled {
		return ns, nil
	}
	objs, err := RenderBase(ctx, "")
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
		return nil, fmt.Errorf("namespace %s: mark: %w", Namespace, err)
	}
	return ns, nil
}

// waitCRDGone deletes the Sync CRD if it is still there (its owner annotation may have been
// dropped by a daemon that installs the CRD itself) and waits until the API server has
// deleted every Sync and the CRD.
func waitCRDGone(ctx context.Context, c client.Client, timeout time.Duration) error {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	err := c.Get(ctx, client.ObjectKey{Name: SyncCRDName}, crd)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("crd %s: %w", SyncCRDName, err)
	}
	if crd.DeletionTimestamp.IsZero() {
		uid := crd.UID
		if err := c.Delete(ctx, crd, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("crd %s: delete: %w", SyncCRDName, err)
		}
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKey{Name: SyncCRDName}, &apiextensionsv1.CustomResourceDefinition{})
		return apierrors.IsNotFound(err), nil
	})
	if err == nil {
		return nil
	}
	held := 0
	if syncs, lerr := ListSyncs(ctx, c); lerr == nil {
		for _, s := range syncs {
			if controllerutil.ContainsFinalizer(&s, v1alpha1.Finalizer) {
				held++
			}
		}
	}
	return fmt.Errorf("crd %s still terminating after %s; %d Syncs carry %s again (is a daemon still running elsewhere?): %w",
		SyncCRDName, timeout, held, v1alpha1.Finalizer, err)
}
