package engine

import (
	"fmt"

	"github.com/fluxcd/pkg/ssa"
	"github.com/pmezard/go-difflib/difflib"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// diffMetadata are the metadata fields the server changes on every write; they are left
// out of a diff because they say nothing about the desired state.
var diffMetadata = []string{"managedFields", "resourceVersion", "generation", "uid",
	"creationTimestamp", "selfLink"}

// unifiedDiff renders a unified diff of live (nil when the object does not exist) against
// the server's dry-run result dry, as YAML without server-managed metadata and status.
// Secret values are masked ("***"); a changed value shows as "*** (before)" and
// "*** (after)", so the diff says that it changed without saying what it is.
func unifiedDiff(id string, live, dry *unstructured.Unstructured) (string, error) {
	a, b := forDiff(live), forDiff(dry)
	if dry.GetKind() == "Secret" && dry.GroupVersionKind().Group == "" {
		if a == nil {
			a = &unstructured.Unstructured{Object: map[string]any{}}
		}
		if err := ssa.SanitizeUnstructuredData(a, b); err != nil {
			return "", fmt.Errorf("diff: mask secret: %w", err)
		}
		if len(a.Object) == 0 {
			a = nil
		}
	}
	ya, err := toYAML(a)
	if err != nil {
		return "", err
	}
	yb, err := toYAML(b)
	if err != nil {
		return "", err
	}
	return difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: difflib.SplitLines(ya), B: difflib.SplitLines(yb),
		FromFile: "live/" + id, ToFile: "desired/" + id, Context: 3,
	})
}

// forDiff returns a copy of u without server-managed metadata and status, and without
// stringData (a Secret's values also show, masked, in data).
func forDiff(u *unstructured.Unstructured) *unstructured.Unstructured {
	if u == nil {
		return nil
	}
	c := u.DeepCopy()
	for _, f := range diffMetadata {
		unstructured.RemoveNestedField(c.Object, "metadata", f)
	}
	unstructured.RemoveNestedField(c.Object, "status")
	unstructured.RemoveNestedField(c.Object, "stringData")
	return c
}

// toYAML renders u as YAML; nil is the empty string.
func toYAML(u *unstructured.Unstructured) (string, error) {
	if u == nil {
		return "", nil
	}
	b, err := yaml.Marshal(u.Object)
	if err != nil {
		return "", fmt.Errorf("diff: %w", err)
	}
	return string(b), nil
}
