package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/cli-utils/pkg/object"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/status"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// Reasons of the deletion conditions and events.
const (
	// reasonCleanupAbandoned: the deletion policy could not be carried out because the
	// identity lost its rights; the finalizer was dropped and objects were left behind.
	reasonCleanupAbandoned = "CleanupAbandoned"
	reasonAbandonFail      = "AbandonFailed"
)

// defaultDeletionGrace is how long a deletion may keep failing with "permission denied"
// before the finalizer is dropped anyway (--deletion-grace).
const defaultDeletionGrace = 2 * time.Minute

// finalize applies the deletion policy and then drops the finalizer, only after every
// delete (Delete) or release (Orphan) is confirmed (I12).
//
// The rule when it cannot be done: a delete or release refused with 401 or 403 (the
// impersonated service account, its RoleBinding or its namespace is gone, or a policy
// denies it) is retried with back-off until the Sync has been deleting for deletionGrace;
// (at most every 10 s); then the finalizer is dropped with a Warning event and a Ready=False condition
// (CleanupAbandoned) listing what was left, so a namespace never stays Terminating
// because of us. Other failures (the API server unavailable, a conflict) are retried
// without limit: they say nothing about the identity, and giving up on them would leak.
func (r *reconciler) finalize(ctx context.Context, s *v1alpha1.Sync) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(s, v1alpha1.Finalizer) {
		r.forget(client.ObjectKeyFromObject(s))
		return ctrl.Result{}, nil
	}
	// A cache that lags may still show a Sync whose finalizer we dropped while another
	// Sync took its name and its inventory (I14): confirm on the API server that this is
	// still the Sync being deleted before deleting anything for it.
	uid := s.UID
	if err := r.live.Get(ctx, client.ObjectKeyFromObject(s), s); err != nil {
		return ctrl.Result{}, r.forgetIfGone(client.ObjectKeyFromObject(s), err)
	}
	if s.UID != uid || s.DeletionTimestamp.IsZero() || !controllerutil.ContainsFinalizer(s, v1alpha1.Finalizer) {
		return ctrl.Result{}, nil
	}
	if wait, res, err := r.awaitDependents(ctx, s); wait {
		return res, err // dependents are deleted first (depends.go)
	}
	if res, err := r.cleanup(ctx, s); err != nil {
		if giveUp, result, err := r.cleanupFailed(ctx, s, uid, res, err); !giveUp {
			return result, err
		}
	}
	if err := r.crash.call(r.crash.BeforeFinalizerRemoval, s); err != nil {
		return ctrl.Result{}, err
	}
	err := r.patchFinalizers(ctx, s, func(s *v1alpha1.Sync) { controllerutil.RemoveFinalizer(s, v1alpha1.Finalizer) })
	if err = client.IgnoreNotFound(err); err == nil {
		r.forget(client.ObjectKeyFromObject(s))
	}
	return ctrl.Result{}, err
}

// cleanupFailed records a deletion policy that could not be carried out (err; res is what
// the cleanup got to) and says whether to give up and drop the finalizer: only when it was
// refused with 401 or 403 for the whole deletion grace. Otherwise the result is the retry:
// on the daemon's own clock for a refusal (the rate limiter's back-off grows to minutes, and
// the grace must end on time), with back-off for any other failure. Giving up re-reads the
// Sync, which may have been re-created under its name (I14): then the result is to stop.
func (r *reconciler) cleanupFailed(ctx context.Context, s *v1alpha1.Sync, uid types.UID, res *engine.Result, err error) (giveUp bool, _ ctrl.Result, _ error) {
	reason := reasonDeleteFail
	if s.Spec.DeletionPolicy == v1alpha1.DeletionPolicyOrphan {
		reason = reasonAbandonFail
	}
	denied := deniedErr(err)
	left := r.deletionGrace() - time.Since(s.DeletionTimestamp.Time)
	if !denied || left > 0 {
		msg := fmt.Sprintf("deletion policy %s: %v", s.Spec.DeletionPolicy, err)
		r.events.Event(s, corev1.EventTypeWarning, reason, truncate(msg, 1024))
		r.deletionStatus(ctx, s, reason, msg)
		if denied {
			logr.FromContextOrDiscard(ctx).Info("deletion refused, will retry", "err", err)
			return false, ctrl.Result{RequeueAfter: min(max(left, 100*time.Millisecond), 10*time.Second)}, nil
		}
		return false, ctrl.Result{}, fmt.Errorf("finalize %s/%s: %w", s.Namespace, s.Name, err)
	}
	msg := fmt.Sprintf("deletion policy %s not carried out, permission denied for %s since %s; left behind: %s; last error: %v",
		s.Spec.DeletionPolicy, r.engines.identity(s), r.deletionGrace(), r.leftBehind(ctx, s, res), err)
	logr.FromContextOrDiscard(ctx).Info("finalizer dropped without cleanup", "err", err)
	r.events.Event(s, corev1.EventTypeWarning, reasonCleanupAbandoned, truncate(msg, 1024))
	r.deletionStatus(ctx, s, reasonCleanupAbandoned, msg)
	// The status write moved the resourceVersion the finalizer patch is locked on.
	if err := r.live.Get(ctx, client.ObjectKeyFromObject(s), s); err != nil {
		return false, ctrl.Result{}, r.forgetIfGone(client.ObjectKeyFromObject(s), err)
	}
	return s.UID == uid, ctrl.Result{}, nil
}

// cleanup carries out the deletion policy with the Sync's identity: Delete deletes the
// inventory's objects, Orphan releases them (owner annotation removed, inventory deleted).
// Both fall back on the recovery copy in status when the inventory ConfigMap is gone.
//
// Both work on the inventory under its new ID, so an inventory still under its legacy ID is
// migrated first. A failed migration is the cleanup's failure and follows finalize's rules
// (a refusal ends with the grace): left unmigrated, the ConfigMap would read as another
// owner's, an error no grace applies to, and the deletion would never end (I12).
func (r *reconciler) cleanup(ctx context.Context, s *v1alpha1.Sync) (*engine.Result, error) {
	eng, err := r.engines.forSync(s)
	if err != nil {
		return nil, err
	}
	if _, err := migrateInventory(ctx, eng, s); err != nil {
		return nil, err
	}
	recover := r.recovery(s)
	if s.Spec.DeletionPolicy == v1alpha1.DeletionPolicyOrphan {
		opts := engine.DefaultDeleteOptions()
		opts.Recover = recover
		return eng.Abandon(ctx, InventoryRef(s), opts)
	}
	opts := engine.DefaultDeleteOptions()
	opts.Recover = recover
	return eng.Delete(ctx, InventoryRef(s), opts)
}

// deletionStatus writes a Ready=False condition on a deleting Sync, best effort: the Sync
// may be gone or its status not writable, and the event says the same.
func (r *reconciler) deletionStatus(ctx context.Context, s *v1alpha1.Sync, reason, msg string) {
	o := status.Outcome{UID: s.UID, Generation: s.Generation, Ready: metav1.ConditionFalse, Reason: reason, Message: msg}
	if err := r.writer.Write(ctx, types.NamespacedName{Namespace: s.Namespace, Name: s.Name}, o); err != nil {
		logr.FromContextOrDiscard(ctx).V(1).Info("deletion status not written", "err", err)
	}
}

func (r *reconciler) deletionGrace() time.Duration {
	if r.grace > 0 {
		return r.grace
	}
	return defaultDeletionGrace
}

// deniedErr reports a refusal of the identity: 401 or 403, anywhere in a joined error.
func deniedErr(err error) bool {
	var found bool
	var walk func(error)
	walk = func(e error) {
		if e == nil || found {
			return
		}
		if apierrors.IsForbidden(e) || apierrors.IsUnauthorized(e) {
			found = true
			return
		}
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
			return
		}
		walk(errors.Unwrap(e))
	}
	walk(err)
	return found
}

// leftBehind names the objects the cleanup did not handle, as Kind namespace/name: the
// failed ones of res, or, when the inventory could not even be read, the recovery copy.
func (r *reconciler) leftBehind(ctx context.Context, s *v1alpha1.Sync, res *engine.Result) string {
	var ids []object.ObjMetadata
	if res != nil {
		for _, c := range res.Pruned {
			if c.Action == engine.ActionFailed {
				ids = append(ids, c.Object)
			}
		}
	}
	if len(ids) == 0 {
		st, _ := r.recoveryCopy(ctx, s) // unreadable: named by its inventory below
		for _, e := range recoveredInventory(st).Entries() {
			ids = append(ids, e.Object)
		}
	}
	if len(ids) == 0 {
		return "the objects of inventory " + InventoryRef(s).String() + " (not readable)"
	}
	const show = 20
	var names []string
	for i, id := range ids {
		if i == show {
			names = append(names, fmt.Sprintf("and %d more", len(ids)-show))
			break
		}
		names = append(names, engine.Describe(id))
	}
	return strings.Join(names, ", ")
}
