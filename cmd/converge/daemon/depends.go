package daemon

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/converge-dev/converge/status"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// Reasons of spec.dependsOn.
const (
	// reasonDependencyNotReady: a Sync of spec.dependsOn is missing, being deleted, not Ready
	// for its current generation, in a cycle with this one, or refused
	// (--no-cross-namespace-refs). Nothing was fetched, applied or pruned.
	reasonDependencyNotReady = "DependencyNotReady"
	// reasonWaitingForDependents: a Sync being deleted with deletionPolicy Delete waits until
	// the Syncs that depend on it are gone (deletion runs in the reverse order).
	reasonWaitingForDependents = "WaitingForDependents"
)

// dependsOnIndex is a field index of the manager's Sync cache: each Sync is listed under the
// "namespace/name" of every Sync it depends on, so the dependents of a Sync are one lookup in
// memory, neither an API request nor a scan of every Sync.
const dependsOnIndex = "converge.dev/dependsOn"

// maxDependencyMessage bounds the part of a dependency's own Ready message that a dependent
// repeats: a chain of dependents would otherwise nest every message of the chain.
const maxDependencyMessage = 1024

// dependencies reads the graph of spec.dependsOn from the manager's Sync cache, so checking
// dependencies costs no API request. The cache may lag the API server by a watch event: a
// dependent then waits (or proceeds) on the state it shows, and the dependents' watch
// triggers it again when the cache catches up.
type dependencies struct {
	cache client.Reader
	// noCrossNamespace refuses a dependency in another namespace, and a dependent in another
	// namespace does not hold up a deletion (--no-cross-namespace-refs).
	noCrossNamespace bool
	// sharded: the cache holds only the Syncs of this daemon's --watch-label-selector.
	sharded bool
}

// dependencyKey is the Sync that d names; an empty namespace is s's own.
func dependencyKey(s *v1alpha1.Sync, d v1alpha1.DependencyReference) types.NamespacedName {
	ns := d.Namespace
	if ns == "" {
		ns = s.Namespace
	}
	return types.NamespacedName{Namespace: ns, Name: d.Name}
}

// indexDependsOn is the dependsOnIndex function: the keys of the Syncs o depends on.
func indexDependsOn(o client.Object) []string {
	s, ok := o.(*v1alpha1.Sync)
	if !ok {
		return nil
	}
	keys := make([]string, 0, len(s.Spec.DependsOn))
	for _, d := range s.Spec.DependsOn {
		keys = append(keys, dependencyKey(s, d).String())
	}
	return keys
}

// blocked is why a Sync may not be applied yet.
type blocked struct {
	message string
	// terminal: only an edit of a Sync can lift it (a cycle, a refused reference). Such an
	// edit changes a generation, which triggers the Syncs involved anyway (For and the
	// dependents' watch), so nothing is gained by retrying before the interval.
	terminal bool
}

// check reports why s must wait for its dependencies, or nil when every dependency is Ready
// for its current generation. In order: a refused cross-namespace reference, a cycle
// through s, then the first dependency (in spec order) that is not ready.
func (d dependencies) check(ctx context.Context, s *v1alpha1.Sync) *blocked {
	if len(s.Spec.DependsOn) == 0 {
		return nil
	}
	if d.noCrossNamespace {
		for i, ref := range s.Spec.DependsOn {
			if k := dependencyKey(s, ref); k.Namespace != s.Namespace {
				return &blocked{terminal: true, message: fmt.Sprintf(
					"spec.dependsOn[%d]: Sync %s is in another namespace: cross-namespace references are refused (converge run --no-cross-namespace-refs)", i, k)}
			}
		}
	}
	if path := d.cycle(ctx, s); path != nil {
		names := make([]string, len(path))
		for i, k := range path {
			names[i] = k.String()
		}
		return &blocked{terminal: true, message: "dependency cycle: " + strings.Join(names, " → ")}
	}
	for _, ref := range s.Spec.DependsOn {
		k := dependencyKey(s, ref)
		dep := &v1alpha1.Sync{}
		if err := d.cache.Get(ctx, k, dep); err != nil {
			if apierrors.IsNotFound(err) && d.sharded {
				return &blocked{message: fmt.Sprintf("dependency %s not found among the Syncs of this shard (--watch-label-selector): a dependency must be in the same shard", k)}
			}
			if apierrors.IsNotFound(err) {
				return &blocked{message: fmt.Sprintf("dependency %s not found", k)}
			}
			// Another namespace than --watch-namespace, or a cache not synced yet.
			return &blocked{message: fmt.Sprintf("dependency %s: %v", k, err)}
		}
		if why := notReady(dep); why != "" {
			if k.Namespace != s.Namespace {
				// Another tenant's Ready message (URLs, paths, errors) is not this one's to read.
				why, _, _ = strings.Cut(why, ": ")
			}
			return &blocked{message: fmt.Sprintf("dependency %s %s", k, why)}
		}
	}
	return nil
}

// notReady says why s cannot be depended on yet, "" when it can: it is Ready=True with
// status.observedGeneration equal to metadata.generation. A suspended Sync is judged on its
// last Ready condition alone, as Flux does (its suspended reconcile moves observedGeneration
// up when Ready is True): suspending bumps the generation and a suspended Sync is never
// reconciled, so the generation check would hold its dependents until it is resumed.
func notReady(s *v1alpha1.Sync) string {
	if !s.DeletionTimestamp.IsZero() {
		return "is being deleted"
	}
	ready := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
	readyTrue := ready != nil && ready.Status == metav1.ConditionTrue
	switch {
	case s.Spec.Suspend && readyTrue:
		return ""
	case s.Spec.Suspend:
		return "is suspended and not Ready" + readyMessage(ready)
	case s.Status.ObservedGeneration != s.Generation:
		return fmt.Sprintf("has not reconciled generation %d", s.Generation)
	case !readyTrue:
		return "is not Ready" + readyMessage(ready)
	}
	return ""
}

func readyMessage(c *metav1.Condition) string {
	if c == nil || c.Message == "" {
		return ""
	}
	return ": " + truncate(c.Message, maxDependencyMessage)
}

// cycle returns the path s → … → s when s depends on itself, directly or through other
// Syncs, nil otherwise. It walks the cache depth-first in spec order, each Sync once, so the
// path is the same on every run and costs no request.
func (d dependencies) cycle(ctx context.Context, s *v1alpha1.Sync) []types.NamespacedName {
	self := client.ObjectKeyFromObject(s)
	seen := map[types.NamespacedName]bool{self: true}
	var walk func(cur *v1alpha1.Sync, path []types.NamespacedName) []types.NamespacedName
	walk = func(cur *v1alpha1.Sync, path []types.NamespacedName) []types.NamespacedName {
		for _, ref := range cur.Spec.DependsOn {
			k := dependencyKey(cur, ref)
			if k == self {
				return append(slices.Clone(path), k)
			}
			if seen[k] {
				continue
			}
			seen[k] = true
			next := &v1alpha1.Sync{}
			if d.cache.Get(ctx, k, next) != nil {
				continue // missing: check reports it if it is s's own dependency
			}
			if p := walk(next, append(path, k)); p != nil {
				return p
			}
		}
		return nil
	}
	return walk(s, []types.NamespacedName{self})
}

// reachable is every Sync that s depends on, directly or not, as the cache shows them.
func (d dependencies) reachable(ctx context.Context, s *v1alpha1.Sync) map[types.NamespacedName]bool {
	seen := map[types.NamespacedName]bool{}
	queue := []*v1alpha1.Sync{s}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, ref := range cur.Spec.DependsOn {
			k := dependencyKey(cur, ref)
			if seen[k] {
				continue
			}
			seen[k] = true
			next := &v1alpha1.Sync{}
			if d.cache.Get(ctx, k, next) == nil {
				queue = append(queue, next)
			}
		}
	}
	return seen
}

// dependents lists the Syncs whose spec.dependsOn names key, from the index. Without a
// cache (a reconciler built for one step, as in unit tests) there are none.
func (d dependencies) dependents(ctx context.Context, key types.NamespacedName) ([]v1alpha1.Sync, error) {
	if d.cache == nil {
		return nil, nil
	}
	list := &v1alpha1.SyncList{}
	if err := d.cache.List(ctx, list, client.MatchingFields{dependsOnIndex: key.String()}); err != nil {
		return nil, fmt.Errorf("dependents of %s: %w", key, err)
	}
	return list.Items, nil
}

// watch registers the index and the two watches that make dependencies event-driven:
//   - a Sync whose readiness changes (or that is created or deleted) triggers its dependents
//     at once, found through the index;
//   - a Sync that is deleted or changes its spec.dependsOn triggers those of its
//     dependencies that are being deleted and may be waiting for it.
//
// Each has its own predicate: the first must see status-only updates (a dependency becoming
// Ready), which the primary watch's syncChanged drops so that a Sync's own status write
// never triggers itself. A Sync's status write triggers only its dependents, and only when
// what they would report about it changed, so a chain settles after one pass.
func (d dependencies) watch(ctx context.Context, mgr ctrl.Manager, b *builder.Builder) (*builder.Builder, error) {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &v1alpha1.Sync{}, dependsOnIndex, indexDependsOn); err != nil {
		return nil, fmt.Errorf("index %s: %w", dependsOnIndex, err)
	}
	return b.
		Watches(&v1alpha1.Sync{}, handler.EnqueueRequestsFromMapFunc(d.dependentsOf), builder.WithPredicates(readinessChanged{})).
		Watches(&v1alpha1.Sync{}, handler.EnqueueRequestsFromMapFunc(d.deletingDependenciesOf), builder.WithPredicates(dependentGone{})), nil
}

// dependentsOf maps a Sync to the Syncs that depend on it.
func (d dependencies) dependentsOf(ctx context.Context, o client.Object) []reconcile.Request {
	list, err := d.dependents(ctx, client.ObjectKeyFromObject(o))
	if err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "dependents not triggered")
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list))
	for i := range list {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list[i])})
	}
	return reqs
}

// deletingDependenciesOf maps a Sync to those of its dependencies that are being deleted:
// they may be waiting for it to be gone.
func (d dependencies) deletingDependenciesOf(ctx context.Context, o client.Object) []reconcile.Request {
	s, ok := o.(*v1alpha1.Sync)
	if !ok {
		return nil
	}
	var reqs []reconcile.Request
	for _, ref := range s.Spec.DependsOn {
		k := dependencyKey(s, ref)
		dep := &v1alpha1.Sync{}
		if d.cache.Get(ctx, k, dep) == nil && !dep.DeletionTimestamp.IsZero() {
			reqs = append(reqs, reconcile.Request{NamespacedName: k})
		}
	}
	return reqs
}

// readinessChanged passes the events of a Sync that change what its dependents see: its
// creation and deletion, and an update that changes notReady (Ready, observedGeneration,
// generation, suspension, deletion, the message of a Sync that is not Ready).
type readinessChanged struct{ predicate.Funcs }

func (readinessChanged) Create(event.CreateEvent) bool   { return true }
func (readinessChanged) Delete(event.DeleteEvent) bool   { return true }
func (readinessChanged) Generic(event.GenericEvent) bool { return true }
func (readinessChanged) Update(e event.UpdateEvent) bool {
	o, okO := e.ObjectOld.(*v1alpha1.Sync)
	n, okN := e.ObjectNew.(*v1alpha1.Sync)
	if !okO || !okN {
		return true
	}
	return o.UID != n.UID || notReady(o) != notReady(n)
}

// dependentGone passes the events after which a Sync may no longer hold up the deletion of
// a dependency: its deletion, and a new generation (its spec.dependsOn may have changed).
type dependentGone struct{ predicate.Funcs }

func (dependentGone) Create(event.CreateEvent) bool   { return false }
func (dependentGone) Delete(event.DeleteEvent) bool   { return true }
func (dependentGone) Generic(event.GenericEvent) bool { return false }
func (dependentGone) Update(e event.UpdateEvent) bool {
	return e.ObjectOld.GetUID() != e.ObjectNew.GetUID() || e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration()
}

// dependencyRetry is when a Sync waiting for its dependencies, or a deletion waiting for its
// dependents, looks again without a trigger: its retry interval, capped at its interval, and
// not growing. The watches trigger it as soon as something changes; this is a safety net
// (a missed event, a cache error), so a back-off would only delay it.
func dependencyRetry(s *v1alpha1.Sync) time.Duration {
	return min(retryBase(s), intervalOf(s))
}

// awaitDependencies records why s waits for its dependencies: Ready=False
// DependencyNotReady (and Stalled for a cycle or a refused reference), written only when it
// changed. Nothing is fetched, applied or pruned, and the last applied revision and the
// inventory stay as they are (I8).
func (r *reconciler) awaitDependencies(ctx context.Context, s *v1alpha1.Sync, b *blocked, start time.Time) (ctrl.Result, error) {
	key := client.ObjectKeyFromObject(s)
	o := status.Outcome{UID: s.UID, Generation: s.Generation, HandledRequest: s.Annotations[v1alpha1.RequestedAtAnnotation],
		Ready: metav1.ConditionFalse, Reason: reasonDependencyNotReady, Message: b.message, Stalled: b.terminal}
	if !says(s, reasonDependencyNotReady, b.message) {
		kind := corev1.EventTypeNormal
		if b.terminal {
			kind = corev1.EventTypeWarning
		}
		r.events.Event(s, kind, reasonDependencyNotReady, truncate(b.message, 1024))
	}
	err := r.writer.Write(ctx, key, o)
	if errors.Is(err, status.ErrReplaced) {
		return ctrl.Result{RequeueAfter: time.Millisecond}, nil // see Reconcile
	}
	r.reconciled(s, o, start, err)
	r.drift.reconciled(key, time.Since(start))
	if err != nil {
		return ctrl.Result{}, err
	}
	logr.FromContextOrDiscard(ctx).V(1).Info("waiting for dependencies", "reason", b.message)
	if b.terminal {
		return ctrl.Result{RequeueAfter: r.next(s, false)}, nil
	}
	return ctrl.Result{RequeueAfter: dependencyRetry(s)}, nil
}

// awaitDependents holds the deletion of s (deletionPolicy Delete) while a Sync that depends
// on it still exists, so dependents are removed first: their objects may need what s
// applied (a CRD, an operator that removes their finalizers). The dependents' removal
// triggers s through the dependentGone watch; the retry interval is a safety net.
//
// It does not wait for a dependent that s itself depends on, directly or not (a cycle:
// both are deleted together, as when their namespace goes, rather than never), nor, with
// --no-cross-namespace-refs, for one in another namespace (a tenant could otherwise hold up
// another tenant's deletion). Orphan deletes nothing, so it never waits. A dependent that
// is not being deleted holds s until it is deleted or drops the dependency; setting
// deletionPolicy Orphan on s lets it go at once.
func (r *reconciler) awaitDependents(ctx context.Context, s *v1alpha1.Sync) (wait bool, res ctrl.Result, err error) {
	if s.Spec.DeletionPolicy == v1alpha1.DeletionPolicyOrphan {
		return false, ctrl.Result{}, nil
	}
	list, err := r.deps.dependents(ctx, client.ObjectKeyFromObject(s))
	if err != nil || len(list) == 0 {
		return err != nil, ctrl.Result{}, err
	}
	inCycle := r.deps.reachable(ctx, s)
	var names []string
	for i := range list {
		k := client.ObjectKeyFromObject(&list[i])
		if inCycle[k] || (r.deps.noCrossNamespace && k.Namespace != s.Namespace) {
			continue
		}
		names = append(names, k.String())
	}
	if len(names) == 0 {
		return false, ctrl.Result{}, nil
	}
	slices.Sort(names)
	const show = 20
	if len(names) > show {
		names = append(names[:show], fmt.Sprintf("and %d more", len(names)-show))
	}
	msg := fmt.Sprintf("waiting for dependents %s to be deleted first", strings.Join(names, ", "))
	if !says(s, reasonWaitingForDependents, msg) {
		r.events.Event(s, corev1.EventTypeNormal, reasonWaitingForDependents, msg)
	}
	r.deletionStatus(ctx, s, reasonWaitingForDependents, msg)
	logr.FromContextOrDiscard(ctx).V(1).Info("deletion waits for dependents", "dependents", names)
	return true, ctrl.Result{RequeueAfter: dependencyRetry(s)}, nil
}

// says reports whether the Ready condition of s already describes its generation with
// reason and msg, so an unchanged wait emits no new event.
func says(s *v1alpha1.Sync, reason, msg string) bool {
	c := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
	return c != nil && s.Status.ObservedGeneration == s.Generation && c.Reason == reason && c.Message == msg
}
