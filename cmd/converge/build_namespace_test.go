package main

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestBuildNamespaceAsApply: "converge build -n NS" prints objects without a namespace in
// NS where apply -n would put them: a ConfigMap and a namespaced custom resource of a CRD of
// the set get it, a Namespace, a ClusterRole and a cluster-scoped custom resource do not,
// and a custom kind of unknown scope keeps none with a line saying so (without it: -n was
// ignored); without -n the objects print as rendered.
func TestBuildNamespaceAsApply(t *testing.T) {
	crd := func(kind, scope string) string {
		return "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: " + strings.ToLower(kind) + "s.example.com}\n" +
			"spec: {group: example.com, scope: " + scope + ", names: {kind: " + kind + ", plural: " + strings.ToLower(kind) + "s}, " +
			"versions: [{name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object}}}]}\n"
	}
	obj := func(apiVersion, kind, name string) string {
		return "apiVersion: " + apiVersion + "\nkind: " + kind + "\nmetadata: {name: " + name + "}\n"
	}
	dir := t.TempDir()
	writeSet(t, dir, "", map[string]string{
		"a.yaml": obj("v1", "ConfigMap", "cm") + "---\n" + obj("v1", "Namespace", "ns") + "---\n" +
			obj("rbac.authorization.k8s.io/v1", "ClusterRole", "cr") + "---\n" + crd("Widget", "Namespaced") + "---\n" +
			crd("Gizmo", "Cluster") + "---\n" + obj("example.com/v1", "Widget", "w") + "---\n" + obj("example.com/v1", "Gizmo", "g") + "---\n" +
			obj("other.example/v1", "Thing", "t"),
	})
	namespaces := func(out string) map[string]string {
		got := map[string]string{}
		for _, doc := range strings.Split(out, "\n---\n") {
			var o struct {
				Kind     string                     `json:"kind"`
				Metadata struct{ Namespace string } `json:"metadata"`
			}
			if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
				t.Fatal(err)
			}
			got[o.Kind] = o.Metadata.Namespace
		}
		return got
	}
	out, errOut, code := runOffline("build", dir, "-n", "apps")
	want := map[string]string{"ConfigMap": "apps", "Widget": "apps", "Namespace": "", "ClusterRole": "", "Gizmo": "",
		"Thing": "", "CustomResourceDefinition": ""}
	got := namespaces(out)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: namespace %q, want %q", k, got[k], v)
		}
	}
	if code != 0 || !strings.Contains(errOut, "namespace apps not set on objects of Thing.other.example") {
		t.Errorf("exit %d, stderr %q: want 0 and a line naming Thing.other.example", code, errOut)
	}
	out, _, _ = runOffline("build", dir)
	if ns := namespaces(out)["ConfigMap"]; ns != "" {
		t.Errorf("without -n: ConfigMap namespace %q, want none", ns)
	}
}
