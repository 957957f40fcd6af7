package daemon

import (
	"context"
	"fmt"

	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/inventory"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// migrateInventory takes over the Sync's inventory stored under its legacy ID
// (InventoryRef's Legacy), before an apply or a deletion works on it under the new ID: the
// one-shot step of the legacy-ID migration (engine.Migrate), removed in v0.2.
func migrateInventory(ctx context.Context, eng *engine.Engine, s *v1alpha1.Sync) (inventory.Ref, error) {
	ref, err := eng.Migrate(ctx, InventoryRef(s), inventory.DefaultMigrateOptions())
	if err != nil {
		return ref, fmt.Errorf("sync %s/%s: %w", s.Namespace, s.Name, err)
	}
	return ref, nil
}
