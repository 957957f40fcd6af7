package inventory

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/converge-dev/converge/e2e/cluster"
)

// TestStoreDeleteKeepsHeadChangedMeanwhile (I2 with two writers): another writer adds an
// entry to the inventory between Delete's read of the head and its first write of it (the
// delete; with parts, the write that detaches them before they are deleted). Delete
// must not remove the head blind: it fails with a conflict (the caller reads again and
// deletes what the inventory now lists), and the inventory, head and parts, is whole.
// Without it, the delete carried a UID precondition only, the head went with the new
// entry in it, and the test failed: Delete succeeded and Get found nothing; with parts,
// Delete removed them first, and the other writer's Update then failed on a missing part.
func TestStoreDeleteKeepsHeadChangedMeanwhile(t *testing.T) {
	cluster.Require(t, env)
	for _, tc := range []struct {
		name  string
		parts bool // the inventory continues in part ConfigMaps
	}{{"one ConfigMap", false}, {"with parts", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			ns := env.Namespace(t)
			s, rec, _ := newStore(t)
			other, _, _ := newStore(t)
			all := []Entry{e(ns, "a", "1")}
			if tc.parts {
				s, rec, _ = smallParts(t)
				other, _, _ = smallParts(t)
				all = entries(ns, "a", 18)
			}
			ref := Ref{Namespace: ns, Name: "inv", ID: "id-1"}
			if err := s.Write(ctx, ref, New(all...)); err != nil {
				t.Fatal(err)
			}
			var once sync.Once
			rec.fail = func(r *http.Request) int {
				write := r.Method == http.MethodDelete || r.Method == http.MethodPut
				if write && strings.HasSuffix(r.URL.Path, "/configmaps/inv") {
					once.Do(func() { // another writer lands just before our first write of the head
						if _, err := other.Update(ctx, ref, func(st *Inventory) *Inventory {
							return st.Union(New(e(ns, "c", "3")))
						}); err != nil {
							t.Error(err)
						}
					})
				}
				return 0
			}
			err := s.Delete(ctx, ref, DeleteOptions{})
			if !apierrors.IsConflict(err) {
				t.Errorf("Delete of a head changed meanwhile: %v, want a conflict", err)
			}
			rec.fail = nil
			want := New(append(all, e(ns, "c", "3"))...).Entries()
			if diff := cmp.Diff(want, mustGet(t, s, ref)); diff != "" {
				t.Errorf("inventory after the refused Delete (-want +got):\n%s", diff)
			}
			// Read again, it deletes.
			if err := s.Delete(ctx, ref, DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			if got := mustGet(t, s, ref); len(got) != 0 {
				t.Errorf("after Delete: %v", got)
			}
		})
	}
}
