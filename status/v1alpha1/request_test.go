package v1alpha1

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
)

// TestReconcileRequest pins the patch both clients send: the webhook's with the Sync's UID,
// the CLI's without (the bytes its former MergeFrom patch produced).
func TestReconcileRequest(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 3600))
	for _, tc := range []struct {
		name string
		uid  types.UID
		want string
	}{
		{"cli", "", `{"metadata":{"annotations":{"converge.dev/requestedAt":"2026-01-02T02:04:05.000000006Z"}}}`},
		{"webhook", "u-1", `{"metadata":{"annotations":{"converge.dev/requestedAt":"2026-01-02T02:04:05.000000006Z"},"uid":"u-1"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			value, patch, err := ReconcileRequest(tc.uid, at)
			if err != nil {
				t.Fatal(err)
			}
			if value != "2026-01-02T02:04:05.000000006Z" {
				t.Errorf("value %q", value)
			}
			if diff := cmp.Diff(tc.want, string(patch)); diff != "" {
				t.Errorf("patch (-want +got):\n%s", diff)
			}
		})
	}
}
