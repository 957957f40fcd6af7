package inventory

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/cli-utils/pkg/object"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/e2e/cluster"
)

// entries returns n entries of ConfigMaps named prefix-000...
func entries(ns, prefix string, n int) []Entry {
	out := make([]Entry, n)
	for i := range out {
		out[i] = e(ns, fmt.Sprintf("%s-%05d", prefix, i), types.UID(fmt.Sprintf("uid-%s-%d", prefix, i)))
	}
	return out
}

// smallParts returns a Store whose ConfigMaps hold about four entries each.
func smallParts(t *testing.T) (*Store, *recorder, client.Client) {
	t.Helper()
	s, rec, plain := newStore(t)
	s.partBytes = 4 * entryBytes(e("t1-teststorepartsconcurrentwriters", "x-00000", "").Object)
	return s, rec, plain
}

// configMaps returns the ConfigMaps of ns by name: their data keys.
func configMaps(t *testing.T, c client.Client, ns string) map[string]*corev1.ConfigMap {
	t.Helper()
	list := &corev1.ConfigMapList{}
	if err := c.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	out := map[string]*corev1.ConfigMap{}
	for i := range list.Items {
		if list.Items[i].Name != "kube-root-ca.crt" {
			out[list.Items[i].Name] = &list.Items[i]
		}
	}
	return out
}

func mustGet(t *testing.T, s *Store, ref Ref) []Entry {
	t.Helper()
	inv, err := s.Get(testCtx(t), ref)
	if err != nil {
		t.Fatal(err)
	}
	return inv.Entries()
}

// TestStoreParts writes an inventory larger than one ConfigMap: it continues in parts that
// the head lists, reads back whole, an unchanged write sends nothing, a grown one writes
// only what changed, and once it shrinks back the parts are gone and the head is exactly
// the one-ConfigMap format.
func TestStoreParts(t *testing.T) {
	cluster.Require(t, env)
	ctx := testCtx(t)
	ns := env.Namespace(t)
	s, rec, plain := smallParts(t)
	ref := Ref{Namespace: ns, Name: "inv", ID: "id-1"}

	all := entries(ns, "a", 18)
	if err := s.Write(ctx, ref, New(all...)); err != nil {
		t.Fatal(err)
	}
	cms := configMaps(t, plain, ns)
	head := cms["inv"]
	if head == nil || head.Labels[IDLabel] != "id-1" || len(head.Data) == 0 {
		t.Fatalf("head: %+v", head)
	}
	names := partNames(head)
	if len(names) < 3 || len(cms) != 1+len(names) {
		t.Fatalf("parts listed %v, ConfigMaps %d: want at least 3 parts, all listed", names, len(cms))
	}
	total := len(head.Data)
	for _, n := range names {
		part := cms[n]
		if part == nil || part.Labels[PartOfLabel] != partOf("id-1") || part.Labels[IDLabel] != "" {
			t.Fatalf("part %s: %+v", n, part)
		}
		total += len(part.Data)
	}
	if total != len(all) {
		t.Errorf("%d entries stored over the ConfigMaps, want %d (each once)", total, len(all))
	}
	if diff := cmp.Diff(New(all...).Entries(), mustGet(t, s, ref)); diff != "" {
		t.Errorf("Get (-want +got):\n%s", diff)
	}

	writes := rec.count("PUT") + rec.count("POST")
	if err := s.Write(ctx, ref, New(all...)); err != nil {
		t.Fatal(err)
	}
	if n := rec.count("PUT") + rec.count("POST") - writes; n != 0 {
		t.Errorf("an unchanged write sent %d writes, want 0", n)
	}

	// One more entry: it fills the last part or starts a new one, and the head is written
	// only if the list of parts changed.
	writes = rec.count("PUT") + rec.count("POST")
	grown := append(all, e(ns, "b-00000", ""))
	if err := s.Write(ctx, ref, New(grown...)); err != nil {
		t.Fatal(err)
	}
	if n := rec.count("PUT") + rec.count("POST") - writes; n < 1 || n > 2 {
		t.Errorf("one more entry sent %d writes, want 1 (a part) or 2 (a new part and the head)", n)
	}
	if diff := cmp.Diff(New(grown...).Entries(), mustGet(t, s, ref)); diff != "" {
		t.Errorf("Get after growing (-want +got):\n%s", diff)
	}

	// Shrink to two entries that sit in parts: the head takes no entry over, but the
	// parts left empty are dropped and deleted.
	small := New(e(ns, "a-00017", "uid-a-17"), e(ns, "b-00000", ""))
	if err := s.Write(ctx, ref, small); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(small.Entries(), mustGet(t, s, ref)); diff != "" {
		t.Errorf("Get after shrinking (-want +got):\n%s", diff)
	}
	for name, cm := range configMaps(t, plain, ns) {
		if name != "inv" && len(cm.Data) == 0 {
			t.Errorf("empty part %s left", name)
		}
	}

	if err := s.Delete(ctx, ref, DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if left := configMaps(t, plain, ns); len(left) != 0 {
		t.Errorf("after Delete, ConfigMaps left: %v", left)
	}
}

// TestStoreSmallStaysOneConfigMap: an inventory that fits keeps today's cli-utils format,
// no annotation and no part, as earlier versions wrote and read it.
func TestStoreSmallStaysOneConfigMap(t *testing.T) {
	cluster.Require(t, env)
	ctx := testCtx(t)
	ns := env.Namespace(t)
	s, _, plain := newStore(t)
	ref := Ref{Namespace: ns, Name: "inv", ID: "id-1"}
	if err := s.Write(ctx, ref, New(entries(ns, "a", 500)...)); err != nil {
		t.Fatal(err)
	}
	cms := configMaps(t, plain, ns)
	if len(cms) != 1 || len(cms["inv"].Data) != 500 || len(cms["inv"].Annotations) != 0 {
		t.Errorf("ConfigMaps %d, head entries %d, annotations %v; want one ConfigMap of 500 entries, no annotation",
			len(cms), len(cms["inv"].Data), cms["inv"].Annotations)
	}
}

// TestStorePartsCrash interrupts writes between two ConfigMaps (the request refused, as a
// crash would leave it): growing, a new part written but not the head (and a second part
// not written at all); shrinking, the head written but the emptied part not deleted. Each
// time the stored inventory holds every entry it held before and none the write did not
// add, and the next write completes it. I2, I3.
func TestStorePartsCrash(t *testing.T) {
	cluster.Require(t, env)
	ctx := testCtx(t)
	ns := env.Namespace(t)
	s, rec, plain := smallParts(t)
	ref := Ref{Namespace: ns, Name: "inv", ID: "id-1"}
	before := New(entries(ns, "a", 10)...)
	if err := s.Write(ctx, ref, before); err != nil {
		t.Fatal(err)
	}
	failOn := func(method string, path func(string) bool, after int) {
		var mu sync.Mutex
		seen := 0
		rec.mu.Lock()
		rec.fail = func(r *http.Request) int {
			if r.Method != method || !path(r.URL.Path) {
				return 0
			}
			mu.Lock()
			defer mu.Unlock()
			if seen++; seen > after {
				return http.StatusForbidden // not retried: the write stops here, as at a crash
			}
			return 0
		}
		rec.mu.Unlock()
	}
	heal := func() { rec.mu.Lock(); rec.fail = nil; rec.mu.Unlock() }
	isHead := func(p string) bool { return strings.HasSuffix(p, "/configmaps/inv") }
	isPart := func(p string) bool { return strings.Contains(p, "/configmaps") && !isHead(p) }

	grown := before.Union(New(entries(ns, "b", 12)...))
	for _, tc := range []struct {
		name   string
		method string
		path   func(string) bool
		after  int
	}{
		{"head not written", http.MethodPut, isHead, 0},
		{"second new part not written", http.MethodPost, isPart, 1},
	} {
		failOn(tc.method, tc.path, tc.after)
		if err := s.Write(ctx, ref, grown); err == nil {
			t.Fatalf("%s: the write succeeded through the injected failure", tc.name)
		}
		heal()
		// Between before and grown: entries written to parts the head lists already
		// may show (a superset is what the write-ahead record allows), none is lost.
		got := New(mustGet(t, s, ref)...)
		if !got.Union(before).Equal(got) || !grown.Union(got).Equal(grown) {
			t.Errorf("%s: stored %v, want every entry of before and nothing outside grown", tc.name, got.Entries())
		}
	}
	if err := s.Write(ctx, ref, grown); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(grown.Entries(), mustGet(t, s, ref)); diff != "" {
		t.Errorf("after the write completed (-want +got):\n%s", diff)
	}

	// Shrink so that parts empty out; their deletion fails after the head is written.
	shrunk := New(entries(ns, "a", 2)...)
	failOn(http.MethodDelete, isPart, 0)
	if err := s.Write(ctx, ref, shrunk); err != nil {
		t.Fatalf("a failed deletion of an emptied part failed the write: %v", err)
	}
	heal()
	if diff := cmp.Diff(shrunk.Entries(), mustGet(t, s, ref)); diff != "" {
		t.Errorf("after shrinking (-want +got):\n%s", diff)
	}
	if n := len(configMaps(t, plain, ns)); n < 2 {
		t.Errorf("%d ConfigMaps: the emptied parts were deleted despite the injected failure", n)
	}
	// Unlisted parts are never read: a write that needs parts again makes new ones.
	if err := s.Write(ctx, ref, grown); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(grown.Entries(), mustGet(t, s, ref)); diff != "" {
		t.Errorf("growing again (-want +got):\n%s", diff)
	}
}

// TestStorePartsDamaged: a listed part that is missing, or that continues another
// inventory, fails the read naming it; nothing is taken as empty.
func TestStorePartsDamaged(t *testing.T) {
	cluster.Require(t, env)
	ctx := testCtx(t)
	ns := env.Namespace(t)
	s, _, plain := smallParts(t)
	ref := Ref{Namespace: ns, Name: "inv", ID: "id-1"}
	if err := s.Write(ctx, ref, New(entries(ns, "a", 10)...)); err != nil {
		t.Fatal(err)
	}
	head := configMaps(t, plain, ns)["inv"]
	names := partNames(head)
	part := configMaps(t, plain, ns)[names[0]]
	part.Labels[PartOfLabel] = partOf("id-2")
	if err := plain.Update(ctx, part); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, ref); err == nil || !strings.Contains(err.Error(), names[0]) {
		t.Errorf("Get with a part of another inventory: %v, want an error naming %s", err, names[0])
	}
	if _, err := s.Update(ctx, ref, func(st *Inventory) *Inventory { return st }); err == nil {
		t.Error("Update with a part of another inventory succeeded")
	}
	if err := plain.Delete(ctx, part); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, ref); err == nil || !strings.Contains(err.Error(), names[0]) || !strings.Contains(err.Error(), "missing") {
		t.Errorf("Get with a missing part: %v, want an error naming %s as missing", err, names[0])
	}
}

// TestStorePartsConcurrentWriters: writers that each add their own entries to one growing
// inventory at the same time lose none of them (the head's resourceVersion decides, the
// losers re-read and retry; an Update out of retries fails, and is tried again, as a
// reconcile would be).
func TestStorePartsConcurrentWriters(t *testing.T) {
	cluster.Require(t, env)
	ctx := testCtx(t)
	ns := env.Namespace(t)
	ref := Ref{Namespace: ns, Name: "inv", ID: "id-1"}
	var wg sync.WaitGroup
	var want []Entry
	for w := range 4 {
		s, _, _ := smallParts(t)
		mine := entries(ns, fmt.Sprintf("w%d", w), 6)
		want = append(want, mine...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, en := range mine {
				// Out of conflict retries, a reconcile tries again later: so does this.
				for {
					_, err := s.Update(ctx, ref, func(st *Inventory) *Inventory { return st.Union(New(en)) })
					if err == nil {
						break
					}
					if !apierrors.IsConflict(err) {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	s, _, _ := smallParts(t)
	if diff := cmp.Diff(New(want...).Entries(), mustGet(t, s, ref)); diff != "" {
		t.Errorf("stored (-want +got):\n%s", diff)
	}
}

// TestStoreBeyondOneConfigMap writes 20,000 entries at the default part size: more than the
// API server takes in one ConfigMap (1 MiB), which is where inventories stopped before (the
// write was refused as too large).
func TestStoreBeyondOneConfigMap(t *testing.T) {
	cluster.Require(t, env)
	ctx := testCtx(t)
	ns := env.Namespace(t)
	s, _, plain := newStore(t)
	ref := Ref{Namespace: ns, Name: "big", ID: "id-big"}
	all := New(entries(ns, "a-long-name-as-real-objects-have", 20000)...)
	if err := s.Write(ctx, ref, all); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, ref); len(got) != 20000 {
		t.Errorf("read back %d entries, want 20000", len(got))
	}
	if n := len(configMaps(t, plain, ns)); n < 2 {
		t.Errorf("%d ConfigMaps, want the inventory split in at least 2", n)
	}
}

// TestStorePartsWriterThatReadBeforeConflicts: writer B reads, writer A then removes an
// entry that sits in a part and finishes, and B writes: B must conflict and read again, so
// its result and the store both lack the entry. Without it, A rewrote only the part, B saw that
// part as unchanged and wrote the head without conflict: B went on with an entry the store
// no longer held (I2).
func TestStorePartsWriterThatReadBeforeConflicts(t *testing.T) {
	cluster.Require(t, env)
	ctx := testCtx(t)
	ns := env.Namespace(t)
	ref := Ref{Namespace: ns, Name: "inv", ID: "id-1"}
	a, _, plain := smallParts(t)
	if err := a.Write(ctx, ref, New(entries(ns, "a", 18)...)); err != nil {
		t.Fatal(err)
	}
	var y Entry
	for name, cm := range configMaps(t, plain, ns) {
		for k, uid := range cm.Data {
			if name != "inv" {
				id, err := object.ParseObjMetadata(k)
				if err != nil {
					t.Fatal(err)
				}
				y = Entry{Object: id, UID: types.UID(uid)}
			}
		}
	}
	if y.Object.Name == "" {
		t.Fatal("no entry in a part")
	}
	b, _, _ := smallParts(t)
	read, resume := make(chan struct{}), make(chan struct{})
	calls := 0
	var bResult *Inventory
	var bErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		bResult, bErr = b.Update(ctx, ref, func(st *Inventory) *Inventory {
			if calls++; calls == 1 {
				close(read)
				<-resume
			}
			return st.Union(New(e(ns, "z", "uid-z")))
		})
	}()
	<-read
	if _, err := a.Update(ctx, ref, func(st *Inventory) *Inventory {
		out := st.Clone()
		out.Remove(y.Object)
		return out
	}); err != nil {
		t.Fatal(err)
	}
	close(resume)
	<-done
	if bErr != nil {
		t.Fatal(bErr)
	}
	stored := New(mustGet(t, a, ref)...)
	if calls < 2 || bResult.Has(y.Object) || stored.Has(y.Object) || !stored.Has(cm(ns, "z")) {
		t.Errorf("B called mutate %d times, its result has %s: %v, the store has it: %v, has z: %v; want a conflict, no %s anywhere, z stored",
			calls, y.Object.Name, bResult.Has(y.Object), stored.Has(y.Object), stored.Has(cm(ns, "z")), y.Object.Name)
	}
}
