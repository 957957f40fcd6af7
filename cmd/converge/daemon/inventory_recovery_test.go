package daemon

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/cli-utils/pkg/object"

	"github.com/converge-dev/converge/inventory"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// TestInventoryStatusRoundTrip checks the recovery copy: objects outside the Sync's
// namespace first, and read back into the same inventory.
func TestInventoryStatusRoundTrip(t *testing.T) {
	ref := inventory.Ref{Namespace: "apps", Name: "web-inventory", ID: "apps_web"}
	id := func(ns, name, group, kind string) object.ObjMetadata {
		return object.ObjMetadata{Namespace: ns, Name: name, GroupKind: schema.GroupKind{Group: group, Kind: kind}}
	}
	inv := inventory.New(
		inventory.Entry{Object: id("apps", "a", "", "ConfigMap"), UID: "u1"},
		inventory.Entry{Object: id("", "r", "rbac.authorization.k8s.io", "ClusterRole"), UID: "u2"},
		inventory.Entry{Object: id("other", "b", "", "ConfigMap")},
	)
	st := inventoryStatus(ref, inv)
	want := []v1alpha1.InventoryObject{
		{ID: "_r_rbac.authorization.k8s.io_ClusterRole", UID: "u2"}, {ID: "other_b__ConfigMap"}, {ID: "apps_a__ConfigMap", UID: "u1"},
	}
	if diff := cmp.Diff(want, st.Objects); diff != "" || st.Entries != 3 || st.Name != ref.Name {
		t.Errorf("status copy (-want +got):\n%s\nentries %d name %s", diff, st.Entries, st.Name)
	}
	back := recoveredInventory(st)
	if !back.Equal(inv) {
		t.Errorf("round trip: %v, want %v", back.Entries(), inv.Entries())
	}
}
