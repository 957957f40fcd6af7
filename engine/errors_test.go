package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"

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
