package daemon

import (
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestDeniedErr(t *testing.T) {
	gr := schema.GroupResource{Resource: "configmaps"}
	forbidden := apierrors.NewForbidden(gr, "a", errors.New("no"))
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"forbidden", forbidden, true},
		{"wrapped", fmt.Errorf("inventory x: read: %w", forbidden), true},
		{"unauthorized", apierrors.NewUnauthorized("token"), true},
		{"joined after a 500", errors.Join(apierrors.NewInternalError(errors.New("x")), fmt.Errorf("b: %w", forbidden)), true},
		{"conflict", apierrors.NewConflict(gr, "a", errors.New("x")), false},
		{"unavailable", apierrors.NewServiceUnavailable("x"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := deniedErr(tc.err); got != tc.want {
				t.Errorf("deniedErr = %v, want %v", got, tc.want)
			}
		})
	}
}
