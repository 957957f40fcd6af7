package inventory

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// OwnerAnnotation is the annotation whose value is the ID of the inventory that owns an
// object (cli-utils' owning-inventory annotation). The engine sets it on every object it
// applies; Migrate rewrites it.
const OwnerAnnotation = "config.k8s.io/owning-inventory"

// MigrateOptions are the per-call settings of Migrate.
type MigrateOptions struct {
	// DryRun writes nothing. When the inventory is still stored under ref.Legacy, Migrate
	// returns ref with ID set to ref.Legacy: a dry-run under it sees the set's objects as
	// its own, as the real run will once they are migrated.
	DryRun bool
	// FieldManager is the field manager of the annotation patches; empty leaves the
	// client's default.
	FieldManager string
	// Concurrency bounds the object reads and patches in flight. Zero or less means 1.
	Concurrency int
}

// DefaultMigrateOptions patches 8 objects at a time as the field manager "converge".
func DefaultMigrateOptions() MigrateOptions {
	return MigrateOptions{FieldManager: "converge", Concurrency: 8}
}

// Migrate takes over the inventory ref.Legacy stored in ref's ConfigMap: every object it
// lists whose owner annotation is ref.Legacy (and whose UID is the recorded one, when one
// is recorded) gets the annotation ref.ID, then the ConfigMap's label becomes ref.ID. It
// returns the Ref to use: ref, or under DryRun the legacy one (see MigrateOptions.DryRun).
//
// Nothing is pruned, re-created or dropped: the objects stay where they are with their
// entries; only the ID changes. Objects the legacy inventory lists but another owner
// annotates are left as they are (the apply reports them, the prune drops them), as before.
// The label is written last, with the resourceVersion read before the objects were
// patched: a crash or a concurrent writer leaves the ConfigMap under the legacy label, and
// the next call patches what is left (a patched object is skipped). A ConfigMap that does
// not exist, already carries ref.ID, or carries another ID is left alone (Get reports the
// last case).
func (s *Store) Migrate(ctx context.Context, ref Ref, opts MigrateOptions) (Ref, error) {
	if ref.Legacy == "" || ref.Legacy == ref.ID {
		return ref, nil
	}
	legacy := ref
	legacy.ID = ref.Legacy
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := s.get(ctx, ref)
		if err != nil || cm == nil || cm.Labels[IDLabel] != ref.Legacy {
			return err
		}
		if opts.DryRun {
			ref = legacy
			return nil
		}
		inv, err := decode(legacy, cm)
		if err != nil {
			return err
		}
		if err := s.reownAll(ctx, ref, inv, opts); err != nil {
			return err
		}
		cm.Labels[IDLabel] = ref.ID
		return s.c.Update(ctx, cm) // carries the resourceVersion read above
	})
	if err != nil {
		return ref, fmt.Errorf("inventory %s: migrate from %q to %q: %w", ref, ref.Legacy, ref.ID, err)
	}
	return ref, nil
}

// reownAll moves the owner annotation of the objects of inv from ref.Legacy to ref.ID.
func (s *Store) reownAll(ctx context.Context, ref Ref, inv *Inventory, opts MigrateOptions) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(opts.Concurrency, 1))
	for _, e := range inv.Entries() {
		g.Go(func() error { return s.reown(gctx, ref, e, opts) })
	}
	return g.Wait()
}

// reown moves the owner annotation of e's object from ref.Legacy to ref.ID, if it is there
// and the object is the one recorded. The patch tests the annotation and the UID it read, so
// an object changed or replaced meanwhile is never taken.
func (s *Store) reown(ctx context.Context, ref Ref, e Entry, opts MigrateOptions) error {
	mapping, err := s.c.RESTMapper().RESTMapping(e.Object.GroupKind)
	if meta.IsNoMatchError(err) {
		return nil // its kind is gone, and so is the object
	}
	if err != nil {
		return fmt.Errorf("%s: %w", e.Object, err)
	}
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(mapping.GroupVersionKind)
	err = s.c.Get(ctx, client.ObjectKey{Namespace: e.Object.Namespace, Name: e.Object.Name}, obj)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("%s: read: %w", e.Object, err)
	case obj.GetAnnotations()[OwnerAnnotation] != ref.Legacy, e.UID != "" && e.UID != obj.GetUID():
		return nil // not the legacy owner's (any more): not ours to take
	}
	patch, err := OwnerPatch(obj.GetUID(), ref.Legacy, ref.ID)
	if err != nil {
		return err
	}
	var po []client.PatchOption
	if opts.FieldManager != "" {
		po = append(po, client.FieldOwner(opts.FieldManager))
	}
	err = s.c.Patch(ctx, obj, client.RawPatch(types.JSONPatchType, patch), po...)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("%s: owner annotation: %w", e.Object, err)
	}
	return nil
}

// OwnerPatch is the JSON patch that moves OwnerAnnotation from the owner from to the owner
// to (removes it when to is ""), only on the object with this UID and only while the
// annotation still names from: an object replaced or taken over since it was read fails
// the patch's test instead of changing hands.
func OwnerPatch(uid types.UID, from, to string) ([]byte, error) {
	path := "/metadata/annotations/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(OwnerAnnotation)
	last := map[string]string{"op": "remove", "path": path}
	if to != "" {
		last = map[string]string{"op": "replace", "path": path, "value": to}
	}
	return json.Marshal([]map[string]string{
		{"op": "test", "path": "/metadata/uid", "value": string(uid)},
		{"op": "test", "path": path, "value": from},
		last,
	})
}
