package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestIsTerminal(t *testing.T) {
	gr := schema.GroupResource{Resource: "configmaps"}
	invalid := apierrors.NewInvalid(schema.GroupKind{Kind: "Service"}, "s",
		field.ErrorList{field.Invalid(field.NewPath("spec", "ports"), 70000, "bad")})
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"invalid 422", fmt.Errorf("x: apply: %w", invalid), true},
		{"bad request", apierrors.NewBadRequest("bad"), true},
		{"no match", &meta.NoKindMatchError{GroupKind: schema.GroupKind{Kind: "W"}}, true},
		{"prune refused", fmt.Errorf("%w: too many", ErrPruneRefused), true},
		{"not owned", terminal(ErrNotOwned), true},
		{"marked terminal", terminal(errors.New("no namespace")), true},
		{"conflict", apierrors.NewConflict(gr, "a", errors.New("x")), false},
		{"too many requests", apierrors.NewTooManyRequests("slow down", 1), false},
		{"internal", apierrors.NewInternalError(errors.New("boom")), false},
		{"unavailable", apierrors.NewServiceUnavailable("down"), false},
		{"timeout", context.DeadlineExceeded, false},
		{"all terminal joined", errors.Join(invalid, terminal(errors.New("x"))), true},
		{"mixed joined", errors.Join(invalid, apierrors.NewConflict(gr, "a", errors.New("x"))), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := IsTerminal(tt.err); got != tt.want {
				t.Errorf("IsTerminal(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestIsImmutable(t *testing.T) {
	imm := apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "c",
		field.ErrorList{field.Forbidden(field.NewPath("data"), "field is immutable when `immutable` is set")})
	plain := apierrors.NewInvalid(schema.GroupKind{Kind: "Service"}, "s",
		field.ErrorList{field.Invalid(field.NewPath("spec", "ports"), 70000, "must be between 1 and 65535")})
	if !isImmutable(imm) {
		t.Errorf("isImmutable(%v) = false", imm)
	}
	if isImmutable(plain) {
		t.Errorf("isImmutable(%v) = true: a plain invalid value would be recreated", plain)
	}
}

func TestStageAndPruneOrder(t *testing.T) {
	kinds := []schema.GroupKind{
		{Kind: "ConfigMap"}, {Group: "apps", Kind: "Deployment"}, {Group: "example.com", Kind: "Widget"},
		{Group: "storage.k8s.io", Kind: "StorageClass"}, clusterRoleGK, crdGK, namespaceGK,
	}
	var stages, ranks []int
	for _, gk := range kinds {
		stages = append(stages, stageOf(gk))
		ranks = append(ranks, pruneRank(gk))
	}
	if diff := cmp.Diff([]int{2, 2, 2, 1, 0, 0, 0}, stages); diff != "" {
		t.Errorf("apply stages (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int{0, 0, 0, 1, 2, 3, 4}, ranks); diff != "" {
		t.Errorf("prune ranks (-want +got):\n%s", diff)
	}
}

func TestCheckPrune(t *testing.T) {
	tests := []struct {
		name                string
		desired, candidates int
		allowEmpty          bool
		budget              int
		wantRefused         bool
	}{
		{name: "nothing to prune", desired: 0, candidates: 0},
		{name: "empty set refused", desired: 0, candidates: 2, wantRefused: true},
		{name: "empty set allowed", desired: 0, candidates: 2, allowEmpty: true},
		{name: "within budget", desired: 5, candidates: 2, budget: 2},
		{name: "over budget", desired: 5, candidates: 3, budget: 2, wantRefused: true},
		{name: "unlimited", desired: 5, candidates: 300},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkPrune(tt.desired, tt.candidates, ApplyOptions{AllowEmpty: tt.allowEmpty, PruneBudget: tt.budget})
			if got := errors.Is(err, ErrPruneRefused); got != tt.wantRefused {
				t.Errorf("checkPrune = %v, want refused %v", err, tt.wantRefused)
			}
		})
	}
}

func TestUnifiedDiffMasksSecrets(t *testing.T) {
	live := obj("v1", "Secret", "ns", "s", map[string]any{"data": map[string]any{"same": "c2FtZQ==", "pw": "b2xk"}})
	dry := obj("v1", "Secret", "ns", "s", map[string]any{"data": map[string]any{"same": "c2FtZQ==", "pw": "bmV3", "added": "eA=="}})
	d, err := unifiedDiff("ns_s__Secret", live, dry)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"c2FtZQ==", "b2xk", "bmV3", "eA=="} {
		if strings.Contains(d, secret) {
			t.Errorf("diff shows secret value %q:\n%s", secret, d)
		}
	}
	for _, want := range []string{"-  pw: '*** (before)'", "+  pw: '*** (after)'", "+  added: '***'"} {
		if !strings.Contains(d, want) {
			t.Errorf("diff lacks %q:\n%s", want, d)
		}
	}
	created, err := unifiedDiff("ns_s__Secret", nil, dry)
	if err != nil || strings.Contains(created, "bmV3") || !strings.Contains(created, "+  pw: '***'") {
		t.Errorf("diff of a new Secret = %v:\n%s", err, created)
	}
}

func TestSummary(t *testing.T) {
	r := &Result{
		Changes: []Change{{Action: ActionCreated}, {Action: ActionConfigured}, {Action: ActionUnchanged},
			{Action: ActionUnchanged}, {Action: ActionSkipped}, {Action: ActionFailed}},
		Pruned: []Change{{Action: ActionPruned}, {Action: ActionSkipped}},
		Health: []ObjectHealth{{Status: "Current"}, {Status: "InProgress"}},
	}
	want := Summary{Created: 1, Configured: 1, Unchanged: 2, Pruned: 1, Skipped: 2, Failed: 1, NotReady: 1}
	if diff := cmp.Diff(want, r.Summary()); diff != "" {
		t.Errorf("Summary (-want +got):\n%s", diff)
	}
}
