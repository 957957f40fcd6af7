package inventory

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/cli-utils/pkg/object"
)

func cm(ns, name string) object.ObjMetadata {
	return object.ObjMetadata{Namespace: ns, Name: name, GroupKind: schema.GroupKind{Kind: "ConfigMap"}}
}

func e(ns, name string, uid types.UID) Entry { return Entry{Object: cm(ns, name), UID: uid} }

func TestUnion(t *testing.T) {
	tests := []struct {
		name       string
		a, b, want []Entry
	}{
		{name: "both empty", want: []Entry{}},
		{name: "disjoint", a: []Entry{e("a", "x", "1")}, b: []Entry{e("b", "y", "")},
			want: []Entry{e("a", "x", "1"), e("b", "y", "")}},
		{name: "write-ahead entry keeps the recorded UID", a: []Entry{e("a", "x", "1")}, b: []Entry{e("a", "x", "")},
			want: []Entry{e("a", "x", "1")}},
		{name: "a new UID wins", a: []Entry{e("a", "x", "1")}, b: []Entry{e("a", "x", "2")},
			want: []Entry{e("a", "x", "2")}},
		{name: "fills a missing UID", a: []Entry{e("a", "x", "")}, b: []Entry{e("a", "x", "3")},
			want: []Entry{e("a", "x", "3")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := New(tt.a...)
			before := a.Entries()
			got := a.Union(New(tt.b...)).Entries()
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Union (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, a.Entries()); diff != "" {
				t.Errorf("Union changed its receiver (-before +after):\n%s", diff)
			}
		})
	}
}

func TestDiff(t *testing.T) {
	tests := []struct {
		name            string
		old, new_, want []Entry
	}{
		{name: "nothing left", old: []Entry{e("a", "x", "1")}, new_: []Entry{e("a", "x", "")}, want: []Entry{}},
		{name: "removed keeps its UID", old: []Entry{e("a", "x", "1"), e("a", "y", "2")}, new_: []Entry{e("a", "x", "")},
			want: []Entry{e("a", "y", "2")}},
		{name: "same name other namespace", old: []Entry{e("a", "x", "1")}, new_: []Entry{e("b", "x", "")},
			want: []Entry{e("a", "x", "1")}},
		{name: "empty new prunes all", old: []Entry{e("a", "x", "1"), e("", "n", "")},
			want: []Entry{e("", "n", ""), e("a", "x", "1")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := New(tt.old...).Diff(New(tt.new_...)).Entries()
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Diff (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEntriesSortedAndEqual(t *testing.T) {
	a := New(e("b", "y", "2"), e("a", "x", "1"), e("", "z", ""))
	want := []Entry{e("", "z", ""), e("a", "x", "1"), e("b", "y", "2")}
	if diff := cmp.Diff(want, a.Entries()); diff != "" {
		t.Errorf("Entries (-want +got):\n%s", diff)
	}
	if !a.Equal(a.Clone()) {
		t.Error("a clone is not Equal")
	}
	b := a.Clone()
	b.Add(e("a", "x", "9"))
	if a.Equal(b) {
		t.Error("inventories with different UIDs are Equal")
	}
	var nilInv *Inventory
	if nilInv.Len() != 0 || !nilInv.Equal(&Inventory{}) {
		t.Error("a nil inventory is not empty")
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	rbac := object.ObjMetadata{Name: "system:foo", GroupKind: schema.GroupKind{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}}
	inv := New(e("a", "x", "1"), Entry{Object: rbac, UID: "u"})
	data := encode(inv)
	want := map[string]string{"a_x__ConfigMap": "1", "_system__foo_rbac.authorization.k8s.io_ClusterRole": "u"}
	if diff := cmp.Diff(want, data); diff != "" {
		t.Errorf("encode (-want +got):\n%s", diff)
	}
}

// encode renders inv as ConfigMap data: key ns_name_group_kind, value the UID (or "").
func encode(inv *Inventory) map[string]string {
	data := make(map[string]string, inv.Len())
	for id, uid := range inv.entries {
		data[id.String()] = string(uid)
	}
	return data
}

// TestAddNew: AddNew adds like Add and tells a new object from one already there.
func TestAddNew(t *testing.T) {
	inv := NewSized(2)
	if !inv.AddNew(e("a", "x", "")) || !inv.AddNew(e("a", "y", "1")) {
		t.Fatal("AddNew of a new object = false")
	}
	if inv.AddNew(e("a", "x", "")) {
		t.Error("AddNew of an object already there = true")
	}
	if want := New(e("a", "x", ""), e("a", "y", "1")); !inv.Equal(want) {
		t.Errorf("inventory = %v, want %v", inv.Entries(), want.Entries())
	}
}

// TestAbsorbs: Absorbs and AbsorbsEach say what Union followed by Equal says, without the copy.
func TestAbsorbs(t *testing.T) {
	tests := []struct {
		name string
		a, b []Entry
		want bool
	}{
		{name: "both empty", want: true},
		{name: "other empty", a: []Entry{e("a", "x", "1")}, want: true},
		{name: "a new object", a: []Entry{e("a", "x", "1")}, b: []Entry{e("b", "y", "")}},
		{name: "a write-ahead entry of a recorded object", a: []Entry{e("a", "x", "1")}, b: []Entry{e("a", "x", "")}, want: true},
		{name: "the same UID", a: []Entry{e("a", "x", "1")}, b: []Entry{e("a", "x", "1")}, want: true},
		{name: "another UID", a: []Entry{e("a", "x", "1")}, b: []Entry{e("a", "x", "2")}},
		{name: "a UID for an entry without", a: []Entry{e("a", "x", "")}, b: []Entry{e("a", "x", "3")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := New(tt.a...), New(tt.b...)
			if got := a.Absorbs(b); got != tt.want {
				t.Errorf("Absorbs = %v, want %v", got, tt.want)
			}
			if got := a.AbsorbsEach(tt.b); got != tt.want {
				t.Errorf("AbsorbsEach = %v, want %v", got, tt.want)
			}
			if union := a.Union(b).Equal(a); union != tt.want {
				t.Errorf("the test's want %v disagrees with Union+Equal: %v", tt.want, union)
			}
		})
	}
}
