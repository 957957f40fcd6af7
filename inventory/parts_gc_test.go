package inventory

import (
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/e2e/cluster"
)

var errCrash = errors.New("crash")

// withHooks returns a Store like s (same client, same part size) with hooks.
func withHooks(s *Store, hooks StoreHooks) *Store {
	return NewStoreWithOptions(s.c, StoreOptions{PartBytes: s.partBytes, Hooks: hooks})
}

// unlisted returns the names of the ConfigMaps of ns labelled as parts of id that the head
// inv does not list.
func unlisted(t *testing.T, c client.Client, ns, id string) []string {
	t.Helper()
	cms := configMaps(t, c, ns)
	head := cms["inv"]
	var out []string
	for name, cm := range cms {
		if cm.Labels[PartOfLabel] == partOf(id) && (head == nil || !slices.Contains(partNames(head), name)) {
			out = append(out, name)
		}
	}
	return out
}

// TestStorePartsGarbageCollected: parts left unlisted by a crash, between creating the parts
// and writing the head, or between writing the head and deleting the parts it dropped, are
// deleted by the next write of the head; a part a writer still under way created over the
// current head is kept; Delete removes unlisted parts too. Without it, unlisted parts stayed
// until removed by hand (the test failed on the first check: the parts were still there).
func TestStorePartsGarbageCollected(t *testing.T) {
	cluster.Require(t, env)
	ctx := testCtx(t)
	ns := env.Namespace(t)
	s, _, plain := smallParts(t)
	ref := Ref{Namespace: ns, Name: "inv", ID: "id-1"}
	if err := s.Write(ctx, ref, New(entries(ns, "a", 10)...)); err != nil {
		t.Fatal(err)
	}

	// A crash before the head: the new parts are unlisted.
	crash := withHooks(s, StoreHooks{BeforeHead: func() error { return errCrash }})
	grown := New(entries(ns, "a", 10)...).Union(New(entries(ns, "b", 10)...))
	if err := crash.Write(ctx, ref, grown); !errors.Is(err, errCrash) {
		t.Fatalf("write through the crash point: %v", err)
	}
	left := unlisted(t, plain, ns, "id-1")
	if len(left) == 0 {
		t.Fatal("the crash left no unlisted part: the crash point is not between parts and head")
	}
	if err := s.Write(ctx, ref, grown); err != nil {
		t.Fatal(err)
	}
	if got := unlisted(t, plain, ns, "id-1"); len(got) != 0 {
		t.Errorf("after the next write of the head, unlisted parts %v are left (the crash left %v)", got, left)
	}

	// A crash after the head, before the dropped parts are deleted; meanwhile another writer
	// that read this head has created a part (it may still list it): it must stay.
	var inflight string
	crash = withHooks(s, StoreHooks{AfterHead: func() error {
		head := configMaps(t, plain, ns)["inv"]
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "inv-part-0badc0de",
			Labels:      map[string]string{PartOfLabel: partOf("id-1")},
			Annotations: map[string]string{partBaseAnnotation: head.ResourceVersion}}}
		inflight = cm.Name
		if err := plain.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		return errCrash
	}})
	shrunk := New(entries(ns, "a", 10)...) // the b entries sit in parts of their own
	if err := crash.Write(ctx, ref, shrunk); !errors.Is(err, errCrash) {
		t.Fatalf("write through the crash point: %v", err)
	}
	if got := unlisted(t, plain, ns, "id-1"); len(got) < 2 {
		t.Fatalf("unlisted parts after the crash: %v, want the dropped ones and %s", got, inflight)
	}
	// A write that leaves the head as it is sends nothing and collects nothing; one that
	// changes it collects, but keeps the in-flight part while the head is the one its writer read.
	s2 := withHooks(s, StoreHooks{AfterHead: func() error {
		// Once written, the head is at another resourceVersion: the in-flight part's
		// writer will conflict. Re-base it so that it stays in flight for this check.
		head := configMaps(t, plain, ns)["inv"]
		cm := configMaps(t, plain, ns)[inflight]
		cm.Annotations[partBaseAnnotation] = head.ResourceVersion
		if err := plain.Update(ctx, cm); err != nil {
			t.Fatal(err)
		}
		return nil
	}})
	if err := s2.Write(ctx, ref, New(entries(ns, "a", 9)...)); err != nil {
		t.Fatal(err)
	}
	if got := unlisted(t, plain, ns, "id-1"); !slices.Equal(got, []string{inflight}) {
		t.Errorf("unlisted parts after the next write: %v, want only the in-flight %s", got, inflight)
	}
	// Its writer lost (the head moved on): the next write of the head deletes it.
	if err := s.Write(ctx, ref, New(entries(ns, "a", 8)...)); err != nil {
		t.Fatal(err)
	}
	if got := unlisted(t, plain, ns, "id-1"); len(got) != 0 {
		t.Errorf("unlisted parts %v left after the head moved past their base", got)
	}

	// Delete removes unlisted parts as well, but not a look-alike: a ConfigMap carrying the
	// part label under a name that is not one of ours (another Sync of the namespace may
	// apply it). Without it, Delete deleted it.
	crash = withHooks(s, StoreHooks{BeforeHead: func() error { return errCrash }})
	if err := crash.Write(ctx, ref, New(entries(ns, "c", 12)...).Union(grown)); !errors.Is(err, errCrash) {
		t.Fatalf("write through the crash point: %v", err)
	}
	lookalike := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "someone-elses",
		Labels: map[string]string{PartOfLabel: partOf("id-1")}}}
	if err := plain.Create(ctx, lookalike); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, ref, DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	remaining := configMaps(t, plain, ns)
	if _, ok := remaining[lookalike.Name]; !ok {
		t.Errorf("Delete deleted %s, a ConfigMap labelled as a part but not named as one", lookalike.Name)
	}
	delete(remaining, lookalike.Name)
	if len(remaining) != 0 {
		names := []string{}
		for n := range remaining {
			names = append(names, n)
		}
		t.Errorf("after Delete, ConfigMaps left: %s", strings.Join(names, ", "))
	}
}

// TestStoreMissingPartError: a listed part deleted by hand fails Get, Lookup and Update
// with a MissingPartError that names the ConfigMap and says what to do; no write is sent.
func TestStoreMissingPartError(t *testing.T) {
	cluster.Require(t, env)
	ctx := testCtx(t)
	ns := env.Namespace(t)
	s, rec, plain := smallParts(t)
	ref := Ref{Namespace: ns, Name: "inv", ID: "id-1"}
	if err := s.Write(ctx, ref, New(entries(ns, "a", 10)...)); err != nil {
		t.Fatal(err)
	}
	name := partNames(configMaps(t, plain, ns)["inv"])[0]
	if err := plain.Delete(ctx, configMaps(t, plain, ns)[name]); err != nil {
		t.Fatal(err)
	}
	writes := rec.count("PUT") + rec.count("POST") + rec.count("DELETE")
	_, err := s.Update(ctx, ref, func(st *Inventory) *Inventory { return st.Union(New(e(ns, "z", ""))) })
	var missing *MissingPartError
	if !errors.As(err, &missing) || missing.Part != name {
		t.Fatalf("Update with a missing part: %v, want a MissingPartError naming %s", err, name)
	}
	for _, want := range []string{ns + "/" + name, "missing", "Restore it", PartsAnnotation, "ConfigMap " + ns + "/inv"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if n := rec.count("PUT") + rec.count("POST") + rec.count("DELETE") - writes; n != 0 {
		t.Errorf("Update with a missing part sent %d writes, want 0", n)
	}
	if _, _, err := s.Lookup(ctx, ref); !errors.As(err, &missing) {
		t.Errorf("Lookup: %v, want a MissingPartError", err)
	}
}

// A writer whose collection runs late (slowed after its head write: a 429, a handover, two
// CLI runs on one inventory) must not delete the parts a newer head lists: a part created
// after its own head write may belong to a newer head. Without it, it deleted them (every read
// then failed with MissingPartError).
func TestStaleCollectorKeepsNewerParts(t *testing.T) {
	cluster.Require(t, env)
	ctx := testCtx(t)
	ns := env.Namespace(t)
	s, _, _ := smallParts(t)
	ref := Ref{Namespace: ns, Name: "inv", ID: "id-1"}
	if err := s.Write(ctx, ref, New(entries(ns, "a", 10)...)); err != nil {
		t.Fatal(err)
	}
	other := withHooks(s, StoreHooks{})
	fired := false
	stale := withHooks(s, StoreHooks{AfterHead: func() error {
		if fired {
			return nil
		}
		fired = true
		// While the first writer is paused after its head write, another writes twice.
		g1 := New(entries(ns, "a", 11)...)
		if err := other.Write(ctx, ref, g1); err != nil {
			t.Fatal(err)
		}
		g2 := g1.Union(New(entries(ns, "b", 10)...))
		if err := other.Write(ctx, ref, g2); err != nil {
			t.Fatal(err)
		}
		if _, err := other.Get(ctx, ref); err != nil {
			t.Fatalf("before the stale collection: %v", err)
		}
		return nil
	}})
	if err := stale.Write(ctx, ref, New(entries(ns, "a", 9)...)); err != nil {
		t.Fatal(err)
	}
	_, err := s.Get(ctx, ref)
	var mp *MissingPartError
	if errors.As(err, &mp) {
		t.Fatalf("a late collection deleted a part a newer head lists: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
}
