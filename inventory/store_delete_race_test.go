package inventory

import (
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/converge-dev/converge/e2e/cluster"
)

// TestStoreDeleteSparesANewWritersParts: a writer that finds no head right after Delete
// removed it creates a new inventory in parts. Delete's last collection of the parts no head
// lists runs after its head is gone, and must not delete the new writer's parts, which the
// new head lists (I2: the objects that writer records would be in no readable inventory).
// It failed before with MissingPartError on the new writer's inventory.
func TestStoreDeleteSparesANewWritersParts(t *testing.T) {
	cluster.Require(t, env)
	ctx := testCtx(t)
	ns := env.Namespace(t)
	s, rec, _ := smallParts(t)
	other, _, _ := smallParts(t)
	ref := Ref{Namespace: ns, Name: "inv", ID: "id-1"}
	if err := s.Write(ctx, ref, New(entries(ns, "a", 10)...)); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	rec.fail = func(r *http.Request) int {
		// Delete's LIST of parts, sent once the head is deleted.
		if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/configmaps") && strings.Contains(r.URL.RawQuery, "labelSelector") {
			once.Do(func() {
				if _, err := other.Update(ctx, ref, func(st *Inventory) *Inventory {
					return st.Union(New(entries(ns, "new", 12)...))
				}); err != nil {
					t.Error(err)
				}
			})
		}
		return 0
	}
	if err := s.Delete(ctx, ref, DeleteOptions{Expect: New(entries(ns, "a", 10)...)}); err != nil {
		t.Fatal(err)
	}
	rec.fail = nil
	_, err := other.Get(ctx, ref)
	var mp *MissingPartError
	if errors.As(err, &mp) {
		t.Fatalf("the new writer's inventory lost a part to Delete's final collection: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
}
