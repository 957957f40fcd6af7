package main

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
)

// oldKind is a kind of Flux or Argo CD and the versions the migration reads, newest first.
type oldKind struct {
	group, resource, kind string
	versions              []string
}

var (
	fluxKustomization = oldKind{"kustomize.toolkit.fluxcd.io", "kustomizations", "Kustomization", []string{"v1", "v1beta2"}}
	fluxGitRepository = oldKind{"source.toolkit.fluxcd.io", "gitrepositories", "GitRepository", []string{"v1", "v1beta2"}}
	fluxOCIRepository = oldKind{"source.toolkit.fluxcd.io", "ocirepositories", "OCIRepository", []string{"v1", "v1beta2"}}
	argoApplication   = oldKind{"argoproj.io", "applications", "Application", []string{"v1alpha1"}}
)

// oldReader reads Flux's and Argo CD's objects at the newest version the cluster serves.
type oldReader struct {
	dc   dynamic.Interface
	disc discovery.DiscoveryInterface
	gvrs map[string]schema.GroupVersionResource
}

// resource is the kind's resource at the newest served version.
func (o *oldReader) resource(k oldKind) (schema.GroupVersionResource, error) {
	if gvr, ok := o.gvrs[k.resource]; ok {
		return gvr, nil
	}
	for _, v := range k.versions {
		gv := schema.GroupVersion{Group: k.group, Version: v}
		list, err := o.disc.ServerResourcesForGroupVersion(gv.String())
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return schema.GroupVersionResource{}, fmt.Errorf("discover %s: %w", gv, err)
		}
		for _, r := range list.APIResources {
			if r.Name == k.resource {
				gvr := gv.WithResource(k.resource)
				o.gvrs[k.resource] = gvr
				return gvr, nil
			}
		}
	}
	return schema.GroupVersionResource{}, fmt.Errorf("this cluster serves no %s (%s/%v): is it installed?", k.kind, k.group, k.versions)
}

// list returns the named object of kind in ns, or all of them in ns ("" for every namespace).
func (o *oldReader) list(ctx context.Context, k oldKind, ns, name string) ([]*unstructured.Unstructured, error) {
	gvr, err := o.resource(k)
	if err != nil {
		return nil, err
	}
	if name != "" {
		u, err := o.dc.Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("%s %s/%s: %w", k.kind, ns, name, err)
		}
		return []*unstructured.Unstructured{u}, nil
	}
	l, err := o.dc.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", k.resource, err)
	}
	out := make([]*unstructured.Unstructured, 0, len(l.Items))
	for i := range l.Items {
		out = append(out, &l.Items[i])
	}
	return out, nil
}

// fluxSource reads the source a Kustomization names: nil (and no error) when its kind is not
// one a Sync reads; an error naming both when it does not exist.
func (o *oldReader) fluxSource(ctx context.Context, ks *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	ref, _, err := unstructured.NestedStringMap(ks.Object, "spec", "sourceRef")
	if err != nil {
		return nil, fmt.Errorf("%s: spec.sourceRef: %w", describeObject(ks), err)
	}
	var k oldKind
	switch ref["kind"] {
	case "GitRepository":
		k = fluxGitRepository
	case "OCIRepository":
		k = fluxOCIRepository
	default:
		return nil, nil
	}
	ns := ref["namespace"]
	if ns == "" {
		ns = ks.GetNamespace()
	}
	if ref["name"] == "" {
		return nil, fmt.Errorf("%s: spec.sourceRef.name: missing", describeObject(ks))
	}
	src, err := o.list(ctx, k, ns, ref["name"])
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%s: its source %s %s/%s does not exist", describeObject(ks), k.kind, ns, ref["name"])
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", describeObject(ks), err)
	}
	return src[0], nil
}

// readFlux translates the Kustomizations in ns (name "" for all), each with its source.
func (o *oldReader) readFlux(ctx context.Context, ns, name string) ([]*migration, error) {
	kss, err := o.list(ctx, fluxKustomization, ns, name)
	if err != nil {
		return nil, err
	}
	var out []*migration
	var errs []error
	for _, ks := range kss {
		ks.SetKind(fluxKustomization.kind)
		src, err := o.fluxSource(ctx, ks)
		if err == nil {
			var m *migration
			if m, err = translateKustomization(ks, src); err == nil {
				out = append(out, m)
			}
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return out, errors.Join(errs...)
}

// readArgo translates the Applications in ns (name "" for all).
func (o *oldReader) readArgo(ctx context.Context, ns, name string) ([]*migration, error) {
	apps, err := o.list(ctx, argoApplication, ns, name)
	if err != nil {
		return nil, err
	}
	var out []*migration
	var errs []error
	for _, app := range apps {
		app.SetKind(argoApplication.kind)
		m, err := translateApplication(app)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, m)
	}
	return out, errors.Join(errs...)
}
