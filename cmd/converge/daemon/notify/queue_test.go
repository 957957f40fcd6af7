package notify

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestQueueDrops: which delivery a push drops, and what is left in order.
func TestQueueDrops(t *testing.T) {
	d := func(ns, name string) *delivery { return &delivery{e: Event{Namespace: ns, Name: name}} }
	tests := []struct {
		name        string
		size, share int
		push        []*delivery
		wantDropped []string
		wantLeft    []string
	}{
		{"room", 4, 4, []*delivery{d("a", "1"), d("b", "2")}, nil, []string{"a/1", "b/2"}},
		{"full: oldest of all", 2, 2, []*delivery{d("a", "1"), d("b", "2"), d("b", "3")}, []string{"a/1"}, []string{"b/2", "b/3"}},
		{"share: own oldest", 4, 2, []*delivery{d("a", "1"), d("b", "2"), d("b", "3"), d("b", "4")}, []string{"b/2"}, []string{"a/1", "b/3", "b/4"}},
		{"full and at share: own oldest", 3, 2, []*delivery{d("a", "1"), d("b", "2"), d("b", "3"), d("b", "4")}, []string{"b/2"}, []string{"a/1", "b/3", "b/4"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := newQueue(tt.size, tt.share)
			var dropped, left []string
			for _, x := range tt.push {
				if old := q.push(x); old != nil {
					dropped = append(dropped, old.e.Namespace+"/"+old.e.Name)
				}
			}
			for x := q.pop(); x != nil; x = q.pop() {
				left = append(left, x.e.Namespace+"/"+x.e.Name)
			}
			if diff := cmp.Diff(tt.wantDropped, dropped); diff != "" {
				t.Errorf("dropped (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantLeft, left); diff != "" {
				t.Errorf("left (-want +got):\n%s", diff)
			}
			if len(q.perNS) != 0 {
				t.Errorf("per-namespace counts left after draining: %v", q.perNS)
			}
		})
	}
}
