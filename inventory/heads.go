package inventory

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
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
// every run reads its inventory, as without Heads) and stops asking: the informer would
// otherwise list again and again, and answer from an ever older list.
type Heads struct {
	informer cache.SharedIndexInformer
	off      atomic.Bool                        // forbidden: answers nothing
	stop     atomic.Pointer[context.CancelFunc] // ends Run
}

// NewHeads returns the watch of the inventory heads of cfg's cluster; Run runs it.
func NewHeads(cfg *rest.Config) (*Heads, error) {
	mc, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("inventory heads: %w", err)
	}
	inf := metadatainformer.NewFilteredMetadataInformer(mc, corev1.SchemeGroupVersion.WithResource("configmaps"),
		metav1.NamespaceAll, 0, cache.Indexers{}, func(o *metav1.ListOptions) { o.LabelSelector = IDLabel }).Informer()
	// Only the resourceVersion is read: drop what could be large.
	if err := inf.SetTransform(func(o any) (any, error) {
		if m, ok := o.(metav1.Object); ok {
			m.SetManagedFields(nil)
			m.SetAnnotations(nil)
		}
		return o, nil
	}); err != nil {
		return nil, fmt.Errorf("inventory heads: %w", err)
	}
	h := &Heads{informer: inf}
	if err := inf.SetWatchErrorHandlerWithContext(h.watchError); err != nil {
		return nil, fmt.Errorf("inventory heads: %w", err)
	}
	return h, nil
}

// Run watches until ctx ends, or until the API server forbids the list or the watch.
func (h *Heads) Run(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	h.stop.Store(&cancel)
	h.informer.RunWithContext(ctx)
}

// watchError turns Heads off when the API server forbids its list or watch; other errors
// are the informer's to retry.
func (h *Heads) watchError(ctx context.Context, r *cache.Reflector, err error) {
	if !apierrors.IsForbidden(err) {
		cache.DefaultWatchErrorHandler(ctx, r, err)
		return
	}
	if h.off.CompareAndSwap(false, true) {
		logr.FromContextOrDiscard(ctx).Info("not watching the inventory ConfigMaps (RBAC: list and watch on configmaps): every reconcile reads its inventory",
			"err", err.Error())
	}
	if stop := h.stop.Load(); stop != nil {
		(*stop)()
	}
}

// Version returns the resourceVersion the watch last saw of the inventory ConfigMap
// namespace/name. ok is false when the watch cannot tell: it has not listed yet, or shows no
// such ConfigMap.
func (h *Heads) Version(namespace, name string) (resourceVersion string, ok bool) {
	if h.off.Load() || !h.informer.HasSynced() {
		return "", false
	}
	o, exists, err := h.informer.GetStore().GetByKey(namespace + "/" + name)
	if err != nil || !exists {
		return "", false
	}
	m, isMeta := o.(metav1.Object)
	if !isMeta {
		return "", false
	}
	return m.GetResourceVersion(), m.GetResourceVersion() != ""
}
