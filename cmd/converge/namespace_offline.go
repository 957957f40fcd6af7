package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/converge-dev/converge/sources"
)

// clusterScoped are the built-in kinds that have no namespace, by group ("" is core).
var clusterScoped = map[string][]string{
	"":                             {"Namespace", "Node", "PersistentVolume", "ComponentStatus"},
	"rbac.authorization.k8s.io":    {"ClusterRole", "ClusterRoleBinding"},
	"apiextensions.k8s.io":         {"CustomResourceDefinition"},
	"apiregistration.k8s.io":       {"APIService"},
	"admissionregistration.k8s.io": {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"},
	"scheduling.k8s.io":            {"PriorityClass"},
	"flowcontrol.apiserver.k8s.io": {"FlowSchema", "PriorityLevelConfiguration"},
	"node.k8s.io":                  {"RuntimeClass"},
	"networking.k8s.io":            {"IngressClass", "IPAddress", "ServiceCIDR"},
	"storage.k8s.io":               {"StorageClass", "CSIDriver", "CSINode", "VolumeAttachment", "VolumeAttributesClass"},
	"certificates.k8s.io":          {"CertificateSigningRequest", "ClusterTrustBundle"},
	"resource.k8s.io":              {"DeviceClass", "ResourceSlice", "DeviceTaintRule"},
	"storagemigration.k8s.io":      {"StorageVersionMigration"},
}

// builtinGroups are the groups whose kinds this binary knows the scope of: every kind of
// them not in clusterScoped is namespaced.
var builtinGroups = map[string]bool{"": true, "apps": true, "batch": true, "autoscaling": true, "policy": true,
	"rbac.authorization.k8s.io": true, "networking.k8s.io": true, "storage.k8s.io": true, "coordination.k8s.io": true,
	"discovery.k8s.io": true, "events.k8s.io": true, "scheduling.k8s.io": true, "node.k8s.io": true,
	"certificates.k8s.io": true, "admissionregistration.k8s.io": true, "apiextensions.k8s.io": true,
	"apiregistration.k8s.io": true, "flowcontrol.apiserver.k8s.io": true, "resource.k8s.io": true,
	"storagemigration.k8s.io": true}

// withNamespace returns b with ns set on its objects that have none and are namespaced, as
// "converge apply -n" applies them: built-in kinds by their known scope, custom kinds by the
// CRDs of the same set. Objects of kinds whose scope cannot be known offline keep no
// namespace, and a line on w names their kinds. b's objects are shared: the changed ones are
// copies.
func withNamespace(b *sources.Bundle, ns string, w io.Writer) *sources.Bundle {
	crds := map[string]bool{} // group/kind → namespaced
	for _, o := range b.Objects {
		if o.GetKind() == "CustomResourceDefinition" {
			group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
			kind, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
			scope, _, _ := unstructured.NestedString(o.Object, "spec", "scope")
			crds[group+"/"+kind] = scope == "Namespaced"
		}
	}
	out := *b
	out.Objects = slices.Clone(b.Objects)
	var unknown []string
	for i, o := range out.Objects {
		if o.GetNamespace() != "" {
			continue
		}
		gk := o.GroupVersionKind().GroupKind()
		namespaced, known := crds[gk.Group+"/"+gk.Kind]
		if !known && builtinGroups[gk.Group] {
			namespaced, known = !slices.Contains(clusterScoped[gk.Group], gk.Kind), true
		}
		switch {
		case !known:
			if k := gk.String(); !slices.Contains(unknown, k) {
				unknown = append(unknown, k)
			}
		case namespaced:
			c := o.DeepCopy()
			c.SetNamespace(ns)
			out.Objects[i] = c
		}
	}
	if len(unknown) > 0 {
		fmt.Fprintf(w, "namespace %s not set on objects of %s: their scope is known to the cluster only (converge apply -n %s sets it when they are namespaced)\n",
			ns, strings.Join(unknown, ", "), ns)
	}
	return &out
}
