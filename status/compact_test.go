package status

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// compactingReader reads from the API server and compacts what it reads, as the daemon's
// informer cache does (CompactInventory in its transform).
type compactingReader struct{ c client.Reader }

func (r compactingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := r.c.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	_, err := CompactInventory(obj)
	return err
}

func (r compactingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return r.c.List(ctx, list, opts...)
}

func inventoryOf(uids ...string) *v1alpha1.InventoryStatus {
	inv := &v1alpha1.InventoryStatus{Name: "web-inventory", Entries: len(uids)}
	for i, u := range uids {
		inv.Objects = append(inv.Objects, v1alpha1.InventoryObject{ID: "apps_cm" + string(rune('a'+i)) + "__ConfigMap", UID: u})
	}
	return inv
}

// TestWriteAgainstACompactedCache: the cache keeps a digest of each recovery copy, not the
// copy. The same copy writes nothing; a write for another reason leaves the copy on the
// server whole; a new copy replaces it; an empty one removes it.
func TestWriteAgainstACompactedCache(t *testing.T) {
	c, ft, key := setup(t)
	ctx := context.Background()
	rev := "main@sha1:4444444444444444444444444444444444444444"
	first := ready(1, rev)
	first.Inventory = inventoryOf("u1", "u2", "u3")
	if err := (&Writer{Live: c, Client: c}).Write(ctx, key, first); err != nil {
		t.Fatal(err)
	}
	w := &Writer{Cached: compactingReader{c}, Live: c, Client: c}
	recorded := func(step string, want *v1alpha1.InventoryStatus) {
		t.Helper()
		if diff := cmp.Diff(want, get(t, c, key).Status.Inventory); diff != "" {
			t.Errorf("%s: status.inventory on the server (-want +got):\n%s", step, diff)
		}
	}

	ft.Reset()
	same := ready(1, rev)
	same.Inventory = inventoryOf("u1", "u2", "u3")
	if err := w.Write(ctx, key, same); err != nil {
		t.Fatal(err)
	}
	if n := ft.Mutating(); n != 0 {
		t.Errorf("the same outcome and copy sent %d writes, want 0", n)
	}

	failed := Outcome{Generation: 1, Ready: metav1.ConditionFalse, Reason: "ApplyFailed", Message: "boom",
		AttemptedRevision: rev, Inventory: inventoryOf("u1", "u2", "u3")}
	if err := w.Write(ctx, key, failed); err != nil {
		t.Fatal(err)
	}
	recorded("another condition, the same copy", inventoryOf("u1", "u2", "u3"))

	changed := ready(1, rev)
	changed.Inventory = inventoryOf("u1", "u4")
	if err := w.Write(ctx, key, changed); err != nil {
		t.Fatal(err)
	}
	recorded("a new copy", inventoryOf("u1", "u4"))

	empty := ready(1, rev)
	empty.Inventory = &v1alpha1.InventoryStatus{Name: "web-inventory"}
	if err := w.Write(ctx, key, empty); err != nil {
		t.Fatal(err)
	}
	recorded("an empty copy", &v1alpha1.InventoryStatus{Name: "web-inventory"})
}

// TestCompactInventory: the copy becomes a digest, which tells copies apart by every ID and
// UID and by where one ends; an empty copy and other objects are left alone.
func TestCompactInventory(t *testing.T) {
	digest := func(inv *v1alpha1.InventoryStatus) string {
		s := &v1alpha1.Sync{Status: v1alpha1.SyncStatus{Inventory: inv}}
		if _, err := CompactInventory(s); err != nil {
			t.Fatal(err)
		}
		if inv != nil && (inv.Objects != nil) {
			t.Errorf("copy kept after compaction: %v", inv.Objects)
		}
		return inv.Digest
	}
	a := digest(inventoryOf("u1", "u2"))
	if a == "" || a != digest(inventoryOf("u1", "u2")) {
		t.Errorf("digest %q, want one, the same for the same copy", a)
	}
	// A tenant may write any bytes into its Sync's status: no copy spells out another.
	ours := &v1alpha1.InventoryStatus{Objects: []v1alpha1.InventoryObject{{ID: "a", UID: "u1"}, {ID: "b", UID: "u2"}}}
	forged := &v1alpha1.InventoryStatus{Objects: []v1alpha1.InventoryObject{{ID: "a\x00u1\x00b", UID: "u2"}}}
	for name, other := range map[string]*v1alpha1.InventoryStatus{"another UID": inventoryOf("u1", "u3"),
		"one entry fewer": inventoryOf("u1")} {
		if d := digest(other); d == a {
			t.Errorf("%s: the same digest", name)
		}
	}
	if digest(ours) == digest(forged) {
		t.Error("entries run together: the same digest as the entries apart")
	}
	if d := digest(&v1alpha1.InventoryStatus{Name: "n"}); d != "" {
		t.Errorf("an empty copy got digest %q", d)
	}
	if s := (&v1alpha1.Sync{}); Compacted(s) {
		t.Error("a Sync without inventory reads as compacted")
	}
	cm := &metav1.PartialObjectMetadata{}
	if got, err := CompactInventory(cm); err != nil || got != cm {
		t.Errorf("another object: %v, %v", got, err)
	}
}
