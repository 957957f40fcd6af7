package daemon

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestTransientAPIError: the start-up retries wait out an API server's hiccups (also when a
// discovery or REST mapping error wraps them) and nothing else: RBAC, a missing CRD, an
// invalid object end the start at once, with their own message.
func TestTransientAPIError(t *testing.T) {
	gr := schema.GroupResource{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{apierrors.NewServiceUnavailable("restarting"), true},
		{fmt.Errorf("failed to get restmapping: %w", fmt.Errorf("failed to get server groups: %w", apierrors.NewServiceUnavailable("x"))), true},
		{apierrors.NewTooManyRequests("slow down", 1), true},
		{apierrors.NewTimeoutError("etcd", 1), true},
		{apierrors.NewInternalError(errors.New("etcd leader changed")), true},
		{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), true},
		{fmt.Errorf("dial: %w", syscall.EHOSTUNREACH), true},
		{&net.DNSError{Err: "i/o timeout", IsTimeout: true}, true},
		{&net.DNSError{Err: "no such host", IsNotFound: true}, false},
		{apierrors.NewForbidden(gr, "syncs.converge.dev", errors.New("RBAC")), false},
		{apierrors.NewNotFound(gr, "x"), false},
		{apierrors.NewInvalid(schema.GroupKind{Kind: "Sync"}, "x", nil), false},
		{&meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: "converge.dev", Kind: "Sync"}}, false},
		{errors.New("embedded Sync CRD: bad yaml"), false},
	} {
		if got := transientAPIError(tc.err); got != tc.want {
			t.Errorf("transientAPIError(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
