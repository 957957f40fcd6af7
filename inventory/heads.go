package inventory

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Heads watches the inventory ConfigMaps (the heads, which carry IDLabel) of the whole
// cluster as metadata only, so a long-lived engine can tell that an inventory has not
// changed since it last read it without reading it again: its resourceVersion is the same
// (every write of an inventory goes through its head, parts.go). One watch serves every
// inventory; its memory is a few hundred bytes per inventory (the engine's memory of what it
// read is apart: engine/heads.go).
//
// What Heads answers is a watch's view, possibly behind the API server: it is good for
// deciding that nothing needs doing, never for a write. Every write still reads the
// inventory from the API server, or checks its version there first (Store.Version).
//
// Without list and watch on ConfigMaps (RBAC), Heads answers nothing (Version's ok is false:
// every run reads its inventory, as without Heads) rather than answer from an ever older
// list, logs that once, and tries again every retry period (RBAC may come back).
type Heads struct {
	client metadata.Interface
	// retry is how long Heads waits after its list or watch was forbidden before it starts
	// a new watch.
	retry time.Duration
	cur   atomic.Pointer[headsWatch] // nil until Run starts the first watch
}

// headsWatch is one run of the informer: a forbidden one answers nothing.
type headsWatch struct {
	informer  cache.SharedIndexInformer
	forbidden atomic.Bool
}

// NewHeads returns the watch of the inventory heads of cfg's cluster; Run runs it.
func NewHeads(cfg *rest.Config) (*Heads, error) {
	mc, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("inventory heads: %w", err)
	}
	return &Heads{client: mc, retry: 10 * time.Minute}, nil
}

// Run watches until ctx ends.
func (h *Heads) Run(ctx context.Context) {
	logged := false
	for {
		wctx, stop := context.WithCancel(ctx)
		w, err := newHeadsWatch(h.client, stop)
		if err != nil { // only for an informer already started: cannot happen
			stop()
			klog.FromContext(ctx).Error(err, "inventory heads")
			return
		}
		h.cur.Store(w)
		w.informer.RunWithContext(wctx) // until ctx ends, or the list or watch is forbidden
		stop()
		if ctx.Err() != nil {
			return
		}
		if !logged {
			klog.FromContext(ctx).Info("not watching the inventory ConfigMaps (RBAC: grant list and watch on configmaps): every reconcile reads its inventory; trying again periodically",
				"retry", h.retry)
			logged = true
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(h.retry):
		}
	}
}

// newHeadsWatch builds one run of the informer, which calls stop when its list or watch is
// forbidden.
func newHeadsWatch(client metadata.Interface, stop context.CancelFunc) (*headsWatch, error) {
	inf := metadatainformer.NewFilteredMetadataInformer(client, corev1.SchemeGroupVersion.WithResource("configmaps"),
		metav1.NamespaceAll, 0, cache.Indexers{}, func(o *metav1.ListOptions) { o.LabelSelector = IDLabel }).Informer()
	if err := inf.SetTransform(keepHead); err != nil {
		return nil, err
	}
	w := &headsWatch{informer: inf}
	if err := inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		if !apierrors.IsForbidden(err) {
			cache.DefaultWatchErrorHandler(ctx, r, err)
			return
		}
		w.forbidden.Store(true)
		stop()
	}); err != nil {
		return nil, err
	}
	return w, nil
}

// keepHead is the heads' cache transform: Version reads only the resourceVersion, under the
// namespace/name key, and the label selector is applied by the API server, so a head is kept
// as those three fields and nothing else. Whoever may create a ConfigMap with IDLabel (any
// tenant) then costs the watch a few dozen bytes per ConfigMap, whatever labels, annotations,
// owner references or managed fields it carries.
func keepHead(o any) (any, error) {
	m, ok := o.(*metav1.PartialObjectMetadata)
	if !ok { // a tombstone (cache.DeletedFinalStateUnknown) holds an object already kept
		return o, nil
	}
	return &metav1.PartialObjectMetadata{TypeMeta: m.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Namespace: m.Namespace, Name: m.Name, ResourceVersion: m.ResourceVersion}}, nil
}

// Version returns the resourceVersion the watch last saw of the inventory ConfigMap
// namespace/name. ok is false when the watch cannot tell: it has not listed yet, may not
// list or watch, or shows no such ConfigMap.
func (h *Heads) Version(namespace, name string) (resourceVersion string, ok bool) {
	w := h.cur.Load()
	if w == nil || w.forbidden.Load() || !w.informer.HasSynced() {
		return "", false
	}
	o, exists, err := w.informer.GetStore().GetByKey(namespace + "/" + name)
	if err != nil || !exists {
		return "", false
	}
	m, isMeta := o.(metav1.Object)
	if !isMeta {
		return "", false
	}
	return m.GetResourceVersion(), m.GetResourceVersion() != ""
}
