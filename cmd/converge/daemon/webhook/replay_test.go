package webhook

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// TestDeliveriesWindowAndBounds checks the replay memory forgets after its window, per Sync,
// and releases a delivery that could not be handled.
func TestDeliveriesWindowAndBounds(t *testing.T) {
	now := time.Unix(0, 0)
	d := newDeliveries(time.Hour, 2, 2)
	d.now = func() time.Time { return now }
	a, b := types.UID("a"), types.UID("b")
	steps := []struct {
		name string
		uid  types.UID
		keys []string
		want bool
	}{
		{"first", a, []string{"1"}, true},
		{"repeat", a, []string{"1"}, false},
		{"other Sync", b, []string{"1"}, true},
		{"any key seen", a, []string{"2", "1"}, false},
		{"no keys", a, nil, true},
	}
	for _, s := range steps {
		if got := d.claim(s.uid, s.keys); got != s.want {
			t.Errorf("%s: claim %v, want %v", s.name, got, s.want)
		}
	}
	d.release(a, []string{"1"})
	if !d.claim(a, []string{"1"}) {
		t.Errorf("a released delivery was refused")
	}
	now = now.Add(time.Hour)
	if !d.claim(a, []string{"1"}) {
		t.Errorf("a delivery older than the window was refused")
	}
}
