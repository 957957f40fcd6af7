package v1alpha1_test

import (
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// TestIgnoreRuleSchema: an ignore rule may name paths, managers or both; one naming neither,
// an empty or too long manager name, too many managers, or Converge's own field manager (by
// name or by a prefix that covers it) is refused as Invalid, naming the field.
func TestIgnoreRuleSchema(t *testing.T) {
	c, ns := setup(t)
	many := make([]any, 33)
	for i := range many {
		many[i] = fmt.Sprintf("m%d", i)
	}
	for i, rule := range []map[string]any{
		{"managers": []any{"kube-controller-manager", "istio-*", "con"}},
		{"paths": []any{"/spec/replicas"}, "managers": []any{"kubectl-scale"}, "target": map[string]any{"kind": "Deployment"}},
	} {
		u := minimal(ns, fmt.Sprintf("ok-%d", i))
		set(t, u, []any{rule}, "spec", "ignore")
		if err := c.Create(t.Context(), u); err != nil {
			t.Errorf("rule %v: %v, want it accepted", rule, err)
		}
	}
	for i, tc := range []struct {
		rule  map[string]any
		field string
	}{
		{map[string]any{"target": map[string]any{"kind": "Deployment"}}, "spec.ignore[0]"},
		{map[string]any{"managers": []any{"converge"}}, "spec.ignore[0].managers"},
		{map[string]any{"managers": []any{"ok", "converge-cli"}}, "spec.ignore[0].managers"},
		{map[string]any{"managers": []any{"conv*"}}, "spec.ignore[0].managers"},
		{map[string]any{"managers": []any{"*"}}, "spec.ignore[0].managers"},
		{map[string]any{"managers": []any{""}}, "spec.ignore[0].managers[0]"},
		{map[string]any{"managers": []any{strings.Repeat("m", 129)}}, "spec.ignore[0].managers[0]"},
		{map[string]any{"managers": many}, "spec.ignore[0].managers"},
		{map[string]any{"managers": []any{}}, "spec.ignore[0].managers"},
	} {
		u := minimal(ns, fmt.Sprintf("bad-%d", i))
		set(t, u, []any{tc.rule}, "spec", "ignore")
		err := c.Create(t.Context(), u)
		if !apierrors.IsInvalid(err) || !causedBy(err, tc.field) {
			t.Errorf("rule %v: %v, want Invalid naming %s", tc.rule, err, tc.field)
		}
	}
}
