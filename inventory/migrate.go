package inventory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
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

// MigratingAnnotation marks an inventory ConfigMap whose migration from a legacy ID (its
// value) has started and not finished: some object it lists may still carry the legacy ID
// in its owner annotation, and is ours when the ConfigMap recorded its UID (Claim.Owns).
const MigratingAnnotation = "converge.dev/migrating-from"

// ErrMigrationPending is wrapped by Migrate's error when the inventory is migrated (it
// carries the new ID) but some of its objects could not be re-annotated yet: they stay
// ours by Claim.Owns, and the next Migrate tries them again. Callers may go on with the
// inventory under the new ID.
var ErrMigrationPending = errors.New("migration not finished")

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
	// Hooks are test-only crash points.
	Hooks MigrateHooks
}

// MigrateHooks are crash points for tests. A hook that returns an error stops Migrate at
// once, as a crash would: no further patch or ConfigMap write. Nil hooks are skipped.
type MigrateHooks struct {
	// AfterRelabel runs after the ConfigMap got the new ID and MigratingAnnotation.
	AfterRelabel func() error
	// AfterReown runs after the j-th object got the new owner annotation (j counts from 1).
	AfterReown func(j int, id string) error
}

// DefaultMigrateOptions patches 8 objects at a time as the field manager "converge".
func DefaultMigrateOptions() MigrateOptions {
	return MigrateOptions{FieldManager: "converge", Concurrency: 8}
}

// Migrate takes over the inventory ref.Legacy stored in ref's ConfigMap under ref.ID, and
// moves the owner annotation of each object it lists from ref.Legacy to ref.ID. It returns
// the Ref to use: ref, or under DryRun the legacy one while the ConfigMap still carries the
// legacy ID (see MigrateOptions.DryRun).
//
// Steps, each safe to crash after:
//
//  1. The ConfigMap's label becomes ref.ID and it gets MigratingAnnotation: ref.Legacy, in
//     one write with the resourceVersion just read. From then on the inventory is ref's,
//     with all its entries (nothing is dropped, pruned or re-created), and each object it
//     lists that carries ref.Legacy with the UID it recorded is ours (Claim.Owns): the
//     engine applies, prunes, deletes and releases it as if it carried ref.ID.
//  2. Each such object gets ref.ID, one JSON patch per object that tests the UID and the
//     annotation it read, so an object replaced or taken over meanwhile never changes
//     hands. Objects are settled one by one: one that cannot be patched (a conflict, a
//     refusal for its kind) stays ours by the rule above and does not hold the others up.
//  3. Once every object is settled (re-annotated, gone, or not the legacy owner's), the
//     annotation is removed and the legacy ID means nothing to ref any more.
//
// When step 2 leaves objects unpatched, Migrate returns an error wrapping
// ErrMigrationPending (the inventory is usable under ref.ID), and the next call resumes at
// step 2. A ConfigMap that does not exist, carries ref.ID without the annotation, or carries
// another ID is left alone (Get reports the last case).
func (s *Store) Migrate(ctx context.Context, ref Ref, opts MigrateOptions) (Ref, error) {
	if ref.Legacy == "" || ref.Legacy == ref.ID {
		return ref, nil
	}
	legacy := ref
	legacy.ID = ref.Legacy
	wrap := func(err error) error {
		return fmt.Errorf("inventory %s: migrate from %q to %q: %w", ref, ref.Legacy, ref.ID, err)
	}
	cm, err := s.get(ctx, ref)
	if err != nil || cm == nil {
		return ref, err
	}
	switch {
	case cm.Labels[IDLabel] == ref.Legacy && opts.DryRun:
		return legacy, nil
	case cm.Labels[IDLabel] == ref.Legacy:
		if cm, err = s.relabel(ctx, ref, cm); err != nil {
			return ref, wrap(err)
		}
		if cm == nil { // taken elsewhere meanwhile (another ID, or deleted): nothing of ours
			return ref, nil
		}
		if err := callHook(opts.Hooks.AfterRelabel); err != nil {
			return ref, wrap(err)
		}
	case cm.Labels[IDLabel] != ref.ID || cm.Annotations[MigratingAnnotation] != ref.Legacy || opts.DryRun:
		return ref, nil
	}
	inv, err := decode(ref, cm)
	if err != nil {
		return ref, wrap(err)
	}
	claim := Claim{ID: ref.ID, Found: true, MigratingFrom: ref.Legacy}
	pending, err := s.reownAll(ctx, claim, inv, opts)
	if err != nil {
		return ref, wrap(err)
	}
	if len(pending) > 0 {
		return ref, wrap(fmt.Errorf("%w: %d objects still carry %s=%s: %w",
			ErrMigrationPending, len(pending), OwnerAnnotation, ref.Legacy, errors.Join(pending...)))
	}
	if err := s.finish(ctx, ref); err != nil {
		return ref, wrap(err)
	}
	return ref, nil
}

// relabel gives cm (read with the legacy label) the label ref.ID and MigratingAnnotation:
// ref.Legacy. On a conflict it re-reads the ConfigMap and tries again while it still carries
// the legacy label; it returns the ConfigMap as written, or nil when it no longer carries
// the legacy label (another writer migrated it, or it is gone).
func (s *Store) relabel(ctx context.Context, ref Ref, cm *corev1.ConfigMap) (*corev1.ConfigMap, error) {
	first := true
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if !first {
			cur, err := s.get(ctx, ref)
			if err != nil {
				return err
			}
			if cur == nil || cur.Labels[IDLabel] != ref.Legacy {
				cm = nil
				return nil
			}
			cm = cur
		}
		first = false
		cm.Labels[IDLabel] = ref.ID
		if cm.Annotations == nil {
			cm.Annotations = map[string]string{}
		}
		cm.Annotations[MigratingAnnotation] = ref.Legacy
		return s.c.Update(ctx, cm) // carries the resourceVersion read
	})
	if err != nil {
		return nil, fmt.Errorf("relabel: %w", err)
	}
	return cm, nil
}

// finish removes MigratingAnnotation from ref's ConfigMap, re-reading it on a conflict (an
// apply may write its entries meanwhile).
func (s *Store) finish(ctx context.Context, ref Ref) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := s.get(ctx, ref)
		if err != nil || cm == nil || cm.Labels[IDLabel] != ref.ID || cm.Annotations[MigratingAnnotation] != ref.Legacy {
			return err
		}
		delete(cm.Annotations, MigratingAnnotation)
		return s.c.Update(ctx, cm)
	})
	if err != nil {
		return fmt.Errorf("finish: %w", err)
	}
	return nil
}

// reownAll moves the owner annotation of the objects of inv that claim owns under the
// legacy ID to claim.ID. pending holds one error per object that still carries the legacy
// ID and could not be patched; err is a crash point's error, which stops it at once.
func (s *Store) reownAll(ctx context.Context, claim Claim, inv *Inventory, opts MigrateOptions) (pending []error, err error) {
	entries := inv.Entries()
	errs := make([]error, len(entries))
	var reowned atomic.Int64
	var abort atomic.Pointer[error]
	var g errgroup.Group // workers never fail: errors go into errs
	g.SetLimit(max(opts.Concurrency, 1))
	for i, e := range entries {
		g.Go(func() error {
			if abort.Load() != nil {
				return nil
			}
			done, err := s.reown(ctx, claim, e, opts)
			if err != nil {
				errs[i] = err
				return nil
			}
			if done && opts.Hooks.AfterReown != nil {
				j := int(reowned.Add(1))
				if err := opts.Hooks.AfterReown(j, e.Object.String()); err != nil {
					err = fmt.Errorf("aborted by hook after re-owning %d (%s): %w", j, e.Object, err)
					abort.CompareAndSwap(nil, &err)
				}
			}
			return nil
		})
	}
	_ = g.Wait()
	if p := abort.Load(); p != nil {
		return nil, *p
	}
	for _, err := range errs {
		if err != nil {
			pending = append(pending, err)
		}
	}
	return pending, nil
}

// reown moves the owner annotation of e's object from claim.MigratingFrom to claim.ID when
// claim owns the object under the legacy ID (Claim.Owns). done reports a patch that landed;
// err an object that still carries the legacy ID, is still ours, and could not be patched.
// An object gone, re-annotated, replaced or taken over meanwhile is settled: not ours to
// take (or already done).
func (s *Store) reown(ctx context.Context, claim Claim, e Entry, opts MigrateOptions) (done bool, err error) {
	mapping, err := s.c.RESTMapper().RESTMapping(e.Object.GroupKind)
	if meta.IsNoMatchError(err) {
		return false, nil // its kind is gone, and so is the object
	}
	if err != nil {
		return false, fmt.Errorf("%s: %w", e.Object, err)
	}
	legacyOwned := func(obj *metav1.PartialObjectMetadata) bool {
		owner := obj.GetAnnotations()[OwnerAnnotation]
		return owner == claim.MigratingFrom && claim.Owns(owner, obj.GetUID(), e.UID)
	}
	read := func() (*metav1.PartialObjectMetadata, error) {
		obj := &metav1.PartialObjectMetadata{}
		obj.SetGroupVersionKind(mapping.GroupVersionKind)
		err := s.c.Get(ctx, client.ObjectKey{Namespace: e.Object.Namespace, Name: e.Object.Name}, obj)
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return obj, err
	}
	obj, err := read()
	switch {
	case err != nil:
		return false, fmt.Errorf("%s: read: %w", e.Object, err)
	case obj == nil || !legacyOwned(obj):
		return false, nil
	}
	patch, err := OwnerPatch(obj.GetUID(), claim.MigratingFrom, claim.ID)
	if err != nil {
		return false, err
	}
	var po []client.PatchOption
	if opts.FieldManager != "" {
		po = append(po, client.FieldOwner(opts.FieldManager))
	}
	perr := s.c.Patch(ctx, obj, client.RawPatch(types.JSONPatchType, patch), po...)
	if perr == nil {
		return true, nil
	}
	// A test operation failed (the object changed since it was read) or the patch was
	// refused: settled only if the API server shows it is no longer the legacy owner's.
	cur, err := read()
	if err == nil && (cur == nil || !legacyOwned(cur)) {
		return false, nil
	}
	return false, fmt.Errorf("%s: owner annotation: %w", e.Object, perr)
}

// callHook runs a test crash point.
func callHook(h func() error) error {
	if h == nil {
		return nil
	}
	if err := h(); err != nil {
		return fmt.Errorf("aborted by hook: %w", err)
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
