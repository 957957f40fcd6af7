package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/inventory"
	"github.com/converge-dev/converge/sources"
)

// cliInventoryRef is the inventory of "converge apply --inventory" named spec: NAMESPACE/NAME,
// or NAME in namespace ns (-n, as kubectl), in the CLI's own ID namespace (cli_<ns>_<name>)
// so it never shares an ID with a Sync or "converge install".
func cliInventoryRef(spec, ns string) (inventory.Ref, error) {
	name := spec
	if before, after, ok := strings.Cut(spec, "/"); ok {
		ns, name = before, after
	}
	if ns == "" || name == "" || strings.Contains(name, "/") {
		return inventory.Ref{}, fmt.Errorf("--inventory %q: want NAMESPACE/NAME, or NAME with -n NAMESPACE", spec)
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return inventory.Ref{}, fmt.Errorf("--inventory %q: namespace %q: %s", spec, ns, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return inventory.Ref{}, fmt.Errorf("--inventory %q: ConfigMap name %q: %s", spec, name, strings.Join(errs, "; "))
	}
	return inventory.Ref{Namespace: ns, Name: name, ID: inventory.ID(inventory.OwnerCLI, ns, name),
		Legacy: inventory.LegacyID(ns, name)}, nil
}

// inventoryRef is the inventory --inventory names (see cliInventoryRef), ns being -n's; the
// zero Ref (no inventory: a plain dry-run diff) without the flag.
func (f *applyFlags) inventoryRef(ns string) (inventory.Ref, error) {
	if f.inventory == "" {
		return inventory.Ref{}, nil
	}
	return cliInventoryRef(f.inventory, ns)
}

// missingNamespace reports whether err is the API server's refusal of a write into the
// namespace ns because it does not exist.
func missingNamespace(err error, ns string) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) || !apierrors.IsNotFound(err) {
		return false
	}
	d := st.Status().Details
	return d != nil && d.Kind == "namespaces" && d.Name == ns
}

// declares reports whether the set of b holds the Namespace ns.
func declares(b *sources.Bundle, ns string) bool {
	for _, o := range b.Objects {
		if o != nil && o.GetAPIVersion() == "v1" && o.GetKind() == "Namespace" && o.GetName() == ns {
			return true
		}
	}
	return false
}

// createNamespace creates the missing namespace of the inventory ref. One the set declares
// is created already owned by the inventory (its owner annotation, under --field-manager), so
// the apply that follows takes it as its own and applies it whole, as it would have created
// it: no --adopt. Another is created bare with --create-namespace, and refused with what to
// do without it.
func (f *applyFlags) createNamespace(ctx context.Context, c client.Client, ref inventory.Ref, b *sources.Bundle) error {
	nsObj := &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: ref.Namespace}}
	var err error
	switch {
	case declares(b, ref.Namespace):
		nsObj.Annotations = map[string]string{engine.OwnerAnnotation: ref.ID}
		err = c.Patch(ctx, nsObj, client.Apply, client.FieldOwner(f.fieldMgr)) //nolint:staticcheck // typed apply configurations are not needed for one annotation
	case f.createNs:
		err = c.Create(ctx, nsObj, client.FieldOwner(f.fieldMgr))
	default:
		return fmt.Errorf("namespace %s does not exist: create it (kubectl create namespace %s) or pass --create-namespace; "+
			"nothing was written (the inventory %s lives in it)", ref.Namespace, ref.Namespace, ref)
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s for the inventory %s: %w", ref.Namespace, ref, err)
	}
	return nil
}
