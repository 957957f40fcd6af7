package engine

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/cli-utils/pkg/object"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// cacheReadTimeout bounds a read from the watch cache, which blocks until the informer of a
// new kind has synced; past it the engine reads from the API server instead (for example when
// RBAC allows get but not a cluster-wide list and watch of a kind).
const cacheReadTimeout = 30 * time.Second

// watchCache is a watch cache of the kinds the engine manages, with managedFields stripped
// so it stays small (a fingerprint of the apply managers' field sets is kept instead:
// fingerprint.go): metadata only for the apply and prune paths, full objects only for the
// readiness of kinds whose status matters. It is started by Engine.Run. With a changed callback it also reports
// out-of-band changes of managed objects (Options.Changed).
type watchCache struct {
	cache   cache.Cache
	direct  client.Reader
	memo    *memo
	changed func(inventoryID string) // nil: nobody listens
	quiet   *quietRuns               // counts every event about a managed object (quiet.go)
	ignored *IgnoredFields           // the ignore rules the fingerprint is blind to (fingerprint.go)
	scoped  bool                     // the cache lists only objects with the scope's label
	watched sync.Map                 // schema.GroupVersionKind → struct{}: handler added
	whole   sync.Map                 // schema.GroupKind → struct{}: an informer of whole objects answered a read
	synced  sync.Map                 // schema.GroupVersionKind → struct{}: its informer answered a read
}

func newWatchCache(cfg *rest.Config, httpClient *http.Client, c client.Client, m *memo, q *quietRuns,
	ignored *IgnoredFields, changed func(string), scope Label) (*watchCache, error) {
	opts := cache.Options{
		HTTPClient: httpClient,
		Scheme:     c.Scheme(),
		Mapper:     c.RESTMapper(),
		DefaultTransform: func(in any) (any, error) {
			// managedFields are there only on the transform's first pass over an object,
			// before anyone reads it: its maps may be replaced then (compact.go), not after.
			if pm, ok := in.(*metav1.PartialObjectMetadata); ok && pm.ManagedFields != nil {
				metadataMaps.compact(pm)
			}
			return ignored.stripManagedFields(in)
		},
	}
	if scope.Key != "" {
		opts.DefaultLabelSelector = labels.SelectorFromSet(labels.Set{scope.Key: scope.Value})
	}
	wc, err := cache.New(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("engine: watch cache: %w", err)
	}
	return &watchCache{cache: wc, direct: c, memo: m, quiet: q, ignored: ignored, changed: changed, scoped: scope.Key != ""}, nil
}

// Get reads obj from the cache, falling back to the API server when the cache cannot
// answer in time. NotFound from an unscoped cache is trusted (callers that act on it use
// preconditions or re-check); a scoped cache (Options.Scope) holds only the objects with its
// label, so its NotFound is asked of the API server: readiness may judge an object the
// engine did not apply (spec.healthChecks), or one whose label was removed.
func (w *watchCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	cctx, cancel := context.WithTimeout(ctx, cacheReadTimeout)
	defer cancel()
	err := w.cache.Get(cctx, key, obj, opts...)
	if err == nil || apierrors.IsNotFound(err) {
		w.watchChanges(ctx, obj)
		if _, ok := obj.(*unstructured.Unstructured); ok {
			// Once per kind: a Load per read, a Store only for a kind not seen yet.
			if gk := obj.GetObjectKind().GroupVersionKind().GroupKind(); !w.cachesWhole(gk) {
				w.whole.Store(gk, struct{}{})
			}
		}
		if err == nil || !w.scoped {
			return err
		}
		return w.direct.Get(ctx, key, obj, opts...)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return w.direct.Get(ctx, key, obj, opts...)
}

// List reads from the cache, like Get.
func (w *watchCache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	cctx, cancel := context.WithTimeout(ctx, cacheReadTimeout)
	defer cancel()
	if err := w.cache.List(cctx, list, opts...); err == nil || ctx.Err() != nil {
		return err
	}
	return w.direct.List(ctx, list, opts...)
}

// cachedLive reads the metadata of the live object of gvk and key from the watch cache; nil
// when it does not exist. The watch cache holds managed objects as metadata only (protobuf on
// the wire): what the fast path decides on (resourceVersion, UID, the owner annotation) is
// there.
//
// The answer shares its maps (labels, annotations, ...) with the cache's own object
// (client.UnsafeDisableDeepCopy): callers only read it and must never modify it. A deep copy
// per object would be about an eighth of the CPU of a no-op reconcile at 50,000 objects, and
// most of its garbage. A kind whose informer has answered once is read without a deadline of
// its own: its reads do not wait for a sync, and a context with a timer per object would be
// the rest of the garbage.
func (w *watchCache) cachedLive(ctx context.Context, gvk schema.GroupVersionKind, key client.ObjectKey) (*metav1.PartialObjectMetadata, error) {
	live := &metav1.PartialObjectMetadata{}
	live.SetGroupVersionKind(gvk)
	var err error
	_, synced := w.synced.Load(gvk)
	if synced {
		err = w.cache.Get(ctx, key, live, client.UnsafeDisableDeepCopy)
	} else {
		cctx, cancel := context.WithTimeout(ctx, cacheReadTimeout)
		err = w.cache.Get(cctx, key, live, client.UnsafeDisableDeepCopy)
		cancel()
	}
	switch {
	case err == nil || apierrors.IsNotFound(err):
		if !synced {
			w.synced.Store(gvk, struct{}{})
		}
		w.watchKind(ctx, gvk)
	case ctx.Err() != nil:
		return nil, ctx.Err()
	default:
		live = &metav1.PartialObjectMetadata{}
		live.SetGroupVersionKind(gvk)
		err = w.direct.Get(ctx, key, live)
	}
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return live, err
}

// watchChanges starts the metadata informer of obj's kind, with the change handler
// (watchKind), when obj is read as metadata.
func (w *watchCache) watchChanges(ctx context.Context, obj client.Object) {
	if _, ok := obj.(*metav1.PartialObjectMetadata); ok {
		w.watchKind(ctx, obj.GetObjectKind().GroupVersionKind())
	}
}

// watchingKind reports whether the metadata informer of a version of gk runs: reading an
// object of gk from the cache starts no informer.
func (w *watchCache) watchingKind(gk schema.GroupKind) bool {
	found := false
	w.watched.Range(func(k, _ any) bool {
		found = k.(schema.GroupVersionKind).GroupKind() == gk
		return !found
	})
	return found
}

// cachesWhole reports whether an informer of whole objects of gk runs: reading one through
// the cache starts none.
func (w *watchCache) cachesWhole(gk schema.GroupKind) bool {
	_, ok := w.whole.Load(gk)
	return ok
}

// watches reports whether the objects of gvk are read through its metadata informer, which
// has answered a read and reports every change to the handlers (quiet.go).
func (w *watchCache) watches(gvk schema.GroupVersionKind) bool {
	_, watched := w.watched.Load(gvk)
	_, synced := w.synced.Load(gvk)
	return watched && synced && (w.changed != nil || w.quiet != nil)
}

// watchKinds starts the metadata informers of the kinds of items (watchKind).
func (w *watchCache) watchKinds(ctx context.Context, items []*item) {
	kinds := map[schema.GroupVersionKind]bool{}
	for _, it := range items {
		if gvk := it.gvk; it.pendingErr == nil && !kinds[gvk] {
			kinds[gvk] = true
			w.watchKind(ctx, gvk)
		}
	}
}

// watchKind starts the metadata informer of gvk if it is not running, without waiting for
// it to sync, and adds the change handler to it when someone listens; once per kind.
func (w *watchCache) watchKind(ctx context.Context, gvk schema.GroupVersionKind) {
	if _, done := w.watched.Load(gvk); done {
		return
	}
	probe := &metav1.PartialObjectMetadata{}
	probe.SetGroupVersionKind(gvk)
	inf, err := w.cache.GetInformer(ctx, probe, cache.BlockUntilSynced(false))
	if err != nil {
		return // tried again on the next read
	}
	if _, loaded := w.watched.LoadOrStore(gvk, struct{}{}); loaded || w.changed == nil && w.quiet == nil {
		return
	}
	gk := gvk.GroupKind()
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { w.onAdd(gk, o) },
		UpdateFunc: func(o, n any) { w.onUpdate(gk, o, n) },
		DeleteFunc: w.onDelete,
	}); err != nil {
		w.watched.Delete(gvk)
	}
}

// onAdd counts a managed object the informer lists (or sees created) for its owner's quiet
// runs, and reports it when it is at another resourceVersion than the one this engine last
// recorded for it: it changed between the engine's write and the informer's start
// (informers of new kinds start after the run that applied them). Objects the engine has no
// record of are not reported.
func (w *watchCache) onAdd(gk schema.GroupKind, obj any) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return
	}
	owner := m.GetAnnotations()[OwnerAnnotation]
	w.quiet.touch(owner)
	if w.changed == nil {
		return
	}
	id := object.ObjMetadata{GroupKind: gk, Namespace: m.GetNamespace(), Name: m.GetName()}
	if owner != "" && w.memo.has(id) && !w.memo.at(id, m.GetResourceVersion()) {
		w.changed(owner)
	}
}

// onUpdate counts every update of a managed object of kind gk for its owner's quiet runs,
// and reports one that changed more than its status, changed what an apply manager owns,
// and was not written by this engine.
func (w *watchCache) onUpdate(gk schema.GroupKind, oldObj, newObj any) {
	o, ok1 := oldObj.(metav1.Object)
	n, ok2 := newObj.(metav1.Object)
	if !ok1 || !ok2 || o.GetResourceVersion() == n.GetResourceVersion() {
		return // not an object, or a resync
	}
	owner, was := n.GetAnnotations()[OwnerAnnotation], o.GetAnnotations()[OwnerAnnotation]
	// Both owners count it: the one the object leaves (its annotation removed or rewritten,
	// or, after a watch gap, another object under the name) and the one it names now.
	w.quiet.touch(was)
	if owner != was {
		w.quiet.touch(owner)
	}
	if owner == "" {
		owner = was // the annotation was removed: still a change of ours
	}
	if owner == "" || w.changed == nil {
		return
	}
	statusOnly := n.GetGeneration() != 0 && n.GetGeneration() == o.GetGeneration() &&
		maps.Equal(n.GetLabels(), o.GetLabels()) && maps.Equal(n.GetAnnotations(), o.GetAnnotations())
	// Every apply manager's field set as it was: whatever changed, no field an apply set
	// (Converge's included) took another value or went away, but for what the owner's
	// ignore rules leave alone (fingerprint.go).
	// A deletion (a deletionTimestamp set while finalizers hold the object) and a new object
	// under the name change no field set and are never others' only.
	othersOnly := appliedSets(n) == appliedSets(o) && appliedSets(n) != "" &&
		n.GetAnnotations()[OwnerAnnotation] == o.GetAnnotations()[OwnerAnnotation] &&
		n.GetUID() == o.GetUID() && n.GetDeletionTimestamp().Equal(o.GetDeletionTimestamp())
	id := object.ObjMetadata{GroupKind: gk, Namespace: n.GetNamespace(), Name: n.GetName()}
	if statusOnly || othersOnly || w.memo.at(id, n.GetResourceVersion()) {
		return
	}
	w.changed(owner)
}

// onDelete counts and reports the deletion of a managed object.
func (w *watchCache) onDelete(obj any) {
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if m, ok := obj.(metav1.Object); ok {
		if owner := m.GetAnnotations()[OwnerAnnotation]; owner != "" {
			w.quiet.touch(owner)
			if w.changed != nil {
				w.changed(owner)
			}
		}
	}
}
