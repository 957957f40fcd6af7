package fault

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// StaleReader is a client.Reader that serves Get and List of frozen kinds from a snapshot
// taken when the kind was frozen, as an informer cache that stopped receiving events does:
// objects created since are missing, deleted ones are still there, changed ones keep their
// old content and resourceVersion. Other kinds, other namespaces and thawed kinds pass
// through to the next reader. Wrap the reader under test with it (a cache, a client) and
// switch it per phase with Freeze and Thaw.
type StaleReader struct {
	next   client.Reader
	scheme *runtime.Scheme

	mu     sync.Mutex
	frozen map[schema.GroupKind]*snapshot
	served int
}

type snapshot struct {
	namespace       string // "" for all namespaces
	resourceVersion string
	objs            map[types.NamespacedName]*unstructured.Unstructured
}

// NewStaleReader wraps next. scheme maps typed objects to their kinds; nil means client-go's
// scheme.
func NewStaleReader(next client.Reader, scheme *runtime.Scheme) *StaleReader {
	if scheme == nil {
		scheme = clientgoscheme.Scheme
	}
	return &StaleReader{next: next, scheme: scheme, frozen: map[schema.GroupKind]*snapshot{}}
}

// Freeze lists the objects of gvk in namespace ("" for all) from the next reader and, until
// Thaw, serves every Get and List of that kind in that namespace from this snapshot.
func (s *StaleReader) Freeze(ctx context.Context, gvk schema.GroupVersionKind, namespace string) error {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err := s.next.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return fmt.Errorf("stale reader: freeze %s: %w", gvk.Kind, err)
	}
	snap := &snapshot{namespace: namespace, resourceVersion: list.GetResourceVersion(),
		objs: map[types.NamespacedName]*unstructured.Unstructured{}}
	for i := range list.Items {
		u := list.Items[i].DeepCopy()
		snap.objs[types.NamespacedName{Namespace: u.GetNamespace(), Name: u.GetName()}] = u
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.frozen[gvk.GroupKind()] = snap
	return nil
}

// Thaw makes reads of gk pass through again.
func (s *StaleReader) Thaw(gk schema.GroupKind) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.frozen, gk)
}

// Served returns how many reads were answered from a snapshot, so a test can show the stale
// view was really read.
func (s *StaleReader) Served() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.served
}

// snapshotFor returns the snapshot serving gk in namespace, counting the read; nil when the
// read passes through.
func (s *StaleReader) snapshotFor(gk schema.GroupKind, namespace string) *snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := s.frozen[gk]
	if snap == nil || (snap.namespace != "" && snap.namespace != namespace) {
		return nil
	}
	s.served++
	return snap
}

// Get implements client.Reader.
func (s *StaleReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	gvk, err := apiutil.GVKForObject(obj, s.scheme)
	if err != nil {
		return err
	}
	snap := s.snapshotFor(gvk.GroupKind(), key.Namespace)
	if snap == nil {
		return s.next.Get(ctx, key, obj, opts...)
	}
	u, ok := snap.objs[key]
	if !ok {
		return apierrors.NewNotFound(schema.GroupResource{Group: gvk.Group, Resource: strings.ToLower(gvk.Kind)}, key.Name)
	}
	return fill(u.DeepCopy().Object, obj)
}

// List implements client.Reader. A frozen kind cannot be listed with a field selector.
func (s *StaleReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	gvk, err := apiutil.GVKForObject(list, s.scheme)
	if err != nil {
		return err
	}
	gvk.Kind = strings.TrimSuffix(gvk.Kind, "List")
	lo := (&client.ListOptions{}).ApplyOptions(opts)
	snap := s.snapshotFor(gvk.GroupKind(), lo.Namespace)
	if snap == nil {
		return s.next.List(ctx, list, opts...)
	}
	if lo.FieldSelector != nil && !lo.FieldSelector.Empty() {
		return errors.New("stale reader: a frozen kind cannot be listed with a field selector")
	}
	out := &unstructured.UnstructuredList{Object: map[string]any{}}
	out.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	out.SetResourceVersion(snap.resourceVersion)
	for _, u := range snap.objs {
		if lo.Namespace != "" && u.GetNamespace() != lo.Namespace {
			continue
		}
		if lo.LabelSelector != nil && !lo.LabelSelector.Matches(labels.Set(u.GetLabels())) {
			continue
		}
		out.Items = append(out.Items, *u.DeepCopy())
	}
	return fill(out.UnstructuredContent(), list)
}

// fill copies unstructured content into obj, typed or unstructured.
func fill(content map[string]any, obj runtime.Object) error {
	if u, ok := obj.(runtime.Unstructured); ok {
		u.SetUnstructuredContent(content)
		return nil
	}
	return runtime.DefaultUnstructuredConverter.FromUnstructured(content, obj)
}
