package inventory

import (
	"context"
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
// Without it, it fails with MissingPartError on the new writer's inventory.
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
		if isPartsList(r) {
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
	readWhole(ctx, t, other, ref, "the new writer's")
}

// readWhole reads ref with s and fails the test when a part its head lists is missing (whose
// inventory it is, in the message) or the read fails otherwise.
func readWhole(ctx context.Context, t *testing.T, s *Store, ref Ref, whose string) *Inventory {
	t.Helper()
	inv, err := s.Get(ctx, ref)
	var mp *MissingPartError
	if errors.As(err, &mp) {
		t.Fatalf("%s inventory lost a part to Delete's last collection: %v", whose, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

// isPartsList reports whether r is a LIST of ConfigMaps by label: Delete's last collection
// of parts, sent once its head is deleted.
func isPartsList(r *http.Request) bool {
	return r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/configmaps") && strings.Contains(r.URL.RawQuery, "labelSelector")
}

// TestStoreDeleteSparesASecondNewWritersParts: after a new writer W3 re-created the head
// (its parts based on "none"), a writer W4 that read W3's head writes parts based on it and
// has not yet written its head when Delete's last collection lists the parts: they must be
// spared too, since W4's head write (its precondition W3's head, still current) lists them.
// Without it, it fails with MissingPartError (the collection spared only parts based on "none").
func TestStoreDeleteSparesASecondNewWritersParts(t *testing.T) {
	cluster.Require(t, env)
	ctx := testCtx(t)
	ns := env.Namespace(t)
	s, rec, _ := smallParts(t)
	w3, _, _ := smallParts(t)
	w4, _, _ := smallParts(t)
	ref := Ref{Namespace: ns, Name: "inv", ID: "id-1"}
	if err := s.Write(ctx, ref, New(entries(ns, "a", 10)...)); err != nil {
		t.Fatal(err)
	}
	partsWritten, release := make(chan struct{}), make(chan struct{})
	var signal sync.Once
	w4.hooks.BeforeHead = func() error {
		signal.Do(func() { close(partsWritten) })
		<-release
		return nil
	}
	w4done := make(chan error, 1)
	var once sync.Once
	rec.fail = func(r *http.Request) int {
		if isPartsList(r) {
			once.Do(func() {
				if _, err := w3.Update(ctx, ref, func(st *Inventory) *Inventory { return st.Union(New(entries(ns, "w3", 12)...)) }); err != nil {
					t.Error(err)
				}
				go func() {
					_, err := w4.Update(ctx, ref, func(st *Inventory) *Inventory { return st.Union(New(entries(ns, "w4", 12)...)) })
					w4done <- err
				}()
				<-partsWritten
			})
		}
		return 0
	}
	if err := s.Delete(ctx, ref, DeleteOptions{Expect: New(entries(ns, "a", 10)...)}); err != nil {
		t.Fatal(err)
	}
	rec.fail = nil
	close(release)
	if err := <-w4done; err != nil {
		t.Fatalf("W4's update: %v", err)
	}
	inv := readWhole(ctx, t, w3, ref, "W4's")
	if n := inv.Len(); n != 24 {
		t.Errorf("the inventory W4 wrote lists %d entries, want 24 (W3's 12 and W4's 12)", n)
	}
}
