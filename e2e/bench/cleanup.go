package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/inventory"
)

// admin is the benchmark's own, uncounted access to the cluster: cleanups, out-of-band
// edits and checks never count against an engine.
type admin struct {
	c  client.Client
	cs *kubernetes.Clientset
	// finalize clears the Namespace finalizer itself: the API profile runs no namespace
	// controller, so a deleted Namespace would stay Terminating.
	finalize bool
	// settle is how long after deleting the Namespaces the cleanup returns. For 30 s after
	// a Namespace is deleted, the API server's NamespaceLifecycle admission looks a
	// namespace of that name up with a live GET on every write into it (its
	// forceLiveLookupTTL); measuring a cold apply inside that window would count one
	// extra server-side GET per object and slow every engine down.
	settle time.Duration
}

// newAdmin returns the benchmark's own client on cfg, the uncounted admin config.
func newAdmin(cfg *rest.Config, finalize bool, settle time.Duration) (*admin, error) {
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &admin{c: c, cs: cs, finalize: finalize, settle: settle}, nil
}

// ensureNamespace creates the namespace of converge's inventory.
func (a *admin) ensureNamespace(ctx context.Context, name string) error {
	err := a.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// leafGVKs are the kinds the cleanup empties a namespace of.
var leafGVKs = []schema.GroupVersionKind{
	{Version: "v1", Kind: "ConfigMap"}, {Version: "v1", Kind: "Secret"}, {Version: "v1", Kind: "Service"},
	{Group: "apps", Version: "v1", Kind: "Deployment"}, {Group: benchGroup, Version: "v1", Kind: "Widget"},
	{Version: "v1", Kind: "Event"},
}

// cleanup deletes the whole workload and converge's inventory and waits until they are
// gone, so that the next cold apply starts from nothing.
func (a *admin) cleanup(ctx context.Context) error {
	inv := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: inventoryRef.Namespace, Name: inventoryRef.Name}}
	if err := a.c.Delete(ctx, inv); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("cleanup: inventory: %w", err)
	}
	// Its parts, beyond 900 KiB of entries (inventory/parts.go).
	if err := a.c.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(inventoryRef.Namespace),
		client.HasLabels{inventory.PartOfLabel}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("cleanup: inventory parts: %w", err)
	}
	var errs []error
	var deleted time.Time // when the first existing Namespace was deleted
	for i := range numNamespaces {
		ns := namespaceName(i)
		for _, gvk := range leafGVKs {
			if err := a.deleteAll(ctx, ns, gvk); err != nil {
				errs = append(errs, fmt.Errorf("cleanup: %s in %s: %w", gvk.Kind, ns, err))
			}
		}
		err := a.c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("cleanup: namespace %s: %w", ns, err))
		}
		if err == nil && deleted.IsZero() {
			deleted = time.Now()
		}
	}
	crd := &unstructured.Unstructured{}
	crd.SetAPIVersion("apiextensions.k8s.io/v1")
	crd.SetKind("CustomResourceDefinition")
	crd.SetName(crdName)
	if err := a.c.Delete(ctx, crd); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("cleanup: CRD: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 5*time.Minute, true, a.gone); err != nil {
		return fmt.Errorf("cleanup: wait until deleted: %w", err)
	}
	if deleted.IsZero() {
		return nil
	}
	return pause(ctx, time.Until(deleted.Add(a.settle)))
}

// deleteAll deletes every object of gvk in ns; a kind that is not served (the CRD is gone)
// has nothing to delete.
func (a *admin) deleteAll(ctx context.Context, ns string, gvk schema.GroupVersionKind) error {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	err := a.c.DeleteAllOf(ctx, u, client.InNamespace(ns), client.PropagationPolicy(metav1.DeletePropagationBackground))
	if err == nil || apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
		return nil
	}
	if !apierrors.IsMethodNotSupported(err) {
		return err
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err := a.c.List(ctx, list, client.InNamespace(ns)); err != nil {
		return err
	}
	for i := range list.Items {
		if err := a.c.Delete(ctx, &list.Items[i]); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// gone reports whether the CRD and every workload Namespace are deleted, finalizing
// Terminating Namespaces when a.finalize is set.
func (a *admin) gone(ctx context.Context) (bool, error) {
	crd := &unstructured.Unstructured{}
	crd.SetAPIVersion("apiextensions.k8s.io/v1")
	crd.SetKind("CustomResourceDefinition")
	err := a.c.Get(ctx, client.ObjectKey{Name: crdName}, crd)
	if !apierrors.IsNotFound(err) {
		return false, nil
	}
	for i := range numNamespaces {
		if gone, err := a.namespaceGone(ctx, namespaceName(i)); err != nil || !gone {
			return false, err
		}
	}
	return true, nil
}

// drift edits the picked live objects with a plain Update from another field manager, as
// kubectl edit or a script would, setting their probed field from n.
func (a *admin) drift(ctx context.Context, objs []*unstructured.Unstructured, picked map[string]bool, n int) error {
	var errs []error
	for _, u := range objs {
		if !picked[keyOf(u)] {
			continue
		}
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(u.GroupVersionKind())
		if err := a.c.Get(ctx, client.ObjectKeyFromObject(u), live); err != nil {
			errs = append(errs, fmt.Errorf("drift %s: %w", keyOf(u), err))
			continue
		}
		setProbe(live, n)
		if err := a.c.Update(ctx, live, client.FieldOwner("bench-drifter")); err != nil {
			errs = append(errs, fmt.Errorf("drift %s: %w", keyOf(u), err))
		}
	}
	return errors.Join(errs...)
}

// corrected counts the picked objects whose live probed field equals the desired one.
func (a *admin) corrected(ctx context.Context, desired []*unstructured.Unstructured, picked map[string]bool) (int, error) {
	n := 0
	for _, u := range desired {
		if !picked[keyOf(u)] {
			continue
		}
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(u.GroupVersionKind())
		if err := a.c.Get(ctx, client.ObjectKeyFromObject(u), live); err != nil {
			return n, fmt.Errorf("check %s: %w", keyOf(u), err)
		}
		if probe(live) == probe(u) {
			n++
		}
	}
	return n, nil
}
