package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/cli-utils/pkg/object"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/inventory"
	"github.com/converge-dev/converge/status"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// maxStatusInventory caps the recovery copy of the inventory in status (about 100 bytes an
// entry), so the status of a large Sync stays far below the API's object size limit.
const maxStatusInventory = 5000

// InventoryRef is where a Sync's inventory lives: a ConfigMap beside the Sync, identified by
// the Sync's namespace and name so a re-created Sync adopts what its predecessor applied.
// The ID is in the Syncs' own ID namespace (sync_<ns>_<name>): no "converge apply
// --inventory" or "converge install" can share it. Legacy is the ID of earlier versions,
// taken over by the engine's Migrate.
func InventoryRef(s *v1alpha1.Sync) inventory.Ref {
	return inventory.Ref{Namespace: s.Namespace, Name: inventoryName(s.Name),
		ID: inventory.ID(inventory.OwnerSync, s.Namespace, s.Name), Legacy: inventory.LegacyID(s.Namespace, s.Name)}
}

// maxWholeName is the longest Sync name kept whole in its inventory's ConfigMap name,
// <name>-inventory. Longer names (up to the 253 of a DNS-1123 subdomain) are cut and end in
// a hash of the whole name, so the ConfigMap name stays valid and unique.
const maxWholeName = 230

// inventoryName is the name of the inventory ConfigMap of the Sync named name.
func inventoryName(name string) string {
	if len(name) > maxWholeName {
		sum := sha256.Sum256([]byte(name))
		// A label of a DNS-1123 subdomain cannot start with "-": no "." before the hash.
		name = strings.TrimRight(name[:maxWholeName-9], ".") + "-" + hex.EncodeToString(sum[:4])
	}
	return name + "-inventory"
}

// recoveryCopy is the inventory record in s's status with its recovery copy. The cache keeps
// a digest of the copy instead (status.CompactInventory): a cached s is read again from the
// API server, and its copy taken only while the Sync there is still s (the same UID, I14):
// a Sync re-created under the name is status.ErrReplaced.
func (r *reconciler) recoveryCopy(ctx context.Context, s *v1alpha1.Sync) (*v1alpha1.InventoryStatus, error) {
	if !status.Compacted(s) {
		return s.Status.Inventory, nil
	}
	live := &v1alpha1.Sync{}
	if err := r.live.Get(ctx, client.ObjectKeyFromObject(s), live); err != nil {
		return nil, err
	}
	if live.UID != s.UID {
		// Another Sync took the name: its copy is not ours, and no copy is not "nothing".
		return nil, fmt.Errorf("%s/%s: %w", s.Namespace, s.Name, status.ErrReplaced)
	}
	return live.Status.Inventory, nil
}

// recovery is the engine's way to the recovery copy of s's inventory, read only when the
// inventory ConfigMap is gone.
func (r *reconciler) recovery(s *v1alpha1.Sync) engine.Recovery {
	return func(ctx context.Context) (*inventory.Inventory, error) {
		st, err := r.recoveryCopy(ctx, s)
		return recoveredInventory(st), err
	}
}

// recoveredInventory is the recovery copy of the inventory record st (nil when there is
// none). Entries that do not parse are skipped: the copy is only a hint.
func recoveredInventory(st *v1alpha1.InventoryStatus) *inventory.Inventory {
	if st == nil || len(st.Objects) == 0 {
		return nil
	}
	inv := &inventory.Inventory{}
	for _, o := range st.Objects {
		id, err := object.ParseObjMetadata(o.ID)
		if err != nil {
			continue
		}
		inv.Add(inventory.Entry{Object: id, UID: types.UID(o.UID)})
	}
	return inv
}

// inventoryStatus is the status record of the inventory inv of ref: its name, size and a
// recovery copy of its entries, capped at maxStatusInventory with the objects outside the
// Sync's namespace first (those a namespace deletion would not take with it).
func inventoryStatus(ref inventory.Ref, inv *inventory.Inventory) *v1alpha1.InventoryStatus {
	out := &v1alpha1.InventoryStatus{Name: ref.Name, Entries: inv.Len()}
	entries := inv.Entries()
	slices.SortStableFunc(entries, func(a, b inventory.Entry) int {
		ao, bo := a.Object.Namespace != ref.Namespace, b.Object.Namespace != ref.Namespace
		switch {
		case ao == bo:
			return 0
		case ao:
			return -1
		}
		return 1
	})
	for i, e := range entries {
		if i == maxStatusInventory {
			break
		}
		out.Objects = append(out.Objects, v1alpha1.InventoryObject{ID: e.Object.String(), UID: string(e.UID)})
	}
	return out
}
