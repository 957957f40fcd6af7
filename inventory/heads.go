package inventory

import (
	"context"
	"fmt"

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
// inventory; its memory is a few hundred bytes per inventory.
//
// What Heads answers is a watch's view, possibly behind the API server: it is good for
// deciding that nothing needs doing, never for a write. Every write still reads the
// inventory from the API server, or checks its version there first (Store.Version).
type Heads struct {
	informer cache.SharedIndexInformer
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
	return &Heads{informer: inf}, nil
}

// Run watches until ctx ends.
func (h *Heads) Run(ctx context.Context) {
	h.informer.RunWithContext(ctx)
}

// Version returns the resourceVersion the watch last saw of the inventory ConfigMap
// namespace/name. ok is false when the watch cannot tell: it has not listed yet, or shows no
// such ConfigMap.
func (h *Heads) Version(namespace, name string) (resourceVersion string, ok bool) {
	if !h.informer.HasSynced() {
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
