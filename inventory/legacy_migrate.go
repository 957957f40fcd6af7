package inventory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/cli-utils/pkg/object"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// MigratingAnnotation marks an inventory ConfigMap whose migration from a legacy ID (its
// value) has started and not finished: some object it lists may still carry the legacy ID
// in its owner annotation, and is ours when the ConfigMap recorded its UID (Migration.Owns).
const MigratingAnnotation = "converge.dev/migrating-from"

// UnrecordedAnnotation lists (a JSON array of object keys) the entries a ConfigMap recorded
// without UID when Migrate relabelled it: the legacy inventory's write-ahead entries, which
// Migrate may take over on the legacy ID's word. It is written with MigratingAnnotation and
// removed with it. Entries written without UID after the relabel are the engine's own
// write-ahead under the new ID: an object they name that carries the legacy ID was never
// recorded by the legacy inventory (the "lost inventory" case) and needs adoption.
const UnrecordedAnnotation = "converge.dev/migrating-unrecorded"

// maxUnrecorded bounds the keys UnrecordedAnnotation holds (annotations share 256 KiB); past
// it the remaining entries without UID are not taken over on the legacy ID's word (the run
// says how to take them: adoption, or the annotation set by hand).
const maxUnrecorded = 1000

// ErrMigrationPending is wrapped by Migrate's error when the inventory is migrated (it
// carries the new ID) but some of its objects could not be re-annotated yet: those it
// recorded with their UID stay ours by Migration.Owns, contested ones (ContestedError) are
// nobody's until a person decides (they stay listed, with the UID recorded: Claim.Contested),
// and the next Migrate tries them again. Callers may go on
// with the inventory under the new ID. The error is a *PendingError.
var ErrMigrationPending = errors.New("migration not finished")

// PendingError is Migrate's error when objects still carry the legacy ID (see
// ErrMigrationPending): which ones, and why each.
type PendingError struct {
	Ref     Ref
	Objects []object.ObjMetadata // sorted as Inventory.Entries
	Errs    []error              // one per object, same order
}

func (e *PendingError) Error() string {
	return fmt.Sprintf("inventory %s: migrate from %q to %q: %v: %d objects still carry %s=%s: %v",
		e.Ref, e.Ref.Legacy, e.Ref.ID, ErrMigrationPending, len(e.Objects), OwnerAnnotation, e.Ref.Legacy, errors.Join(e.Errs...))
}

// Unwrap makes errors.Is(err, ErrMigrationPending) hold, and reaches each object's error.
func (e *PendingError) Unwrap() []error { return append([]error{ErrMigrationPending}, e.Errs...) }

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
	// Only, when not nil, limits the re-owning of a migration already under way (the
	// ConfigMap carries MigratingAnnotation when Migrate reads it) to these objects: the
	// ones an earlier call left pending (PendingError.Objects). Every other entry was
	// settled by that call, or was added by an apply under the new ID. One of them the
	// ConfigMap no longer lists stays pending while its object carries the legacy ID (a
	// person gave it to the other inventory of that ID, whose migration has yet to take it).
	// A ConfigMap found under the legacy ID again is migrated in full.
	Only []object.ObjMetadata
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
//     lists that carries ref.Legacy with the UID it recorded is ours (Migration.Owns): the
//     engine applies, prunes, deletes and releases it as if it carried ref.ID.
//  2. Each such object gets ref.ID, one JSON patch per object that tests the UID and the
//     annotation it read, so an object replaced or taken over meanwhile never changes
//     hands. Objects are settled one by one: one that cannot be patched (a conflict, a
//     refusal for its kind) stays ours by the rule above and does not hold the others up.
//     An entry the legacy inventory recorded without UID (written ahead by a run that
//     stopped before it recorded the UID; step 1 lists them in UnrecordedAnnotation, so
//     the engine's own write-ahead entries under ref.ID never count as such) is the
//     inventory's when its object carries ref.Legacy and the other
//     inventory that shared ref.Legacy (Sibling) does not list it: its UID is recorded, in
//     one ConfigMap write for all such entries, so it stays ours (Migration.Owns) if the patch
//     fails. An object the sibling lists is contested: left as it is, and reported.
//  3. Once every object is settled (re-annotated, gone, or not the legacy owner's), the
//     annotation is removed and the legacy ID means nothing to ref any more.
//
// When step 2 leaves objects unpatched or contested, Migrate returns a *PendingError
// (wrapping ErrMigrationPending; the inventory is usable under ref.ID), and the next call
// resumes at step 2 (for MigrateOptions.Only of them). A ConfigMap that does not exist, carries ref.ID without the annotation, or carries
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
	only := opts.Only
	switch {
	case cm.Labels[IDLabel] == ref.Legacy && opts.DryRun:
		return legacy, nil
	case cm.Labels[IDLabel] == ref.Legacy:
		only = nil // a new migration (or a restored backup): every entry
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
	st, err := s.readFrom(ctx, ref, cm)
	if err != nil {
		return ref, wrap(err)
	}
	inv, err := decodeStored(ref, st)
	if err != nil {
		return ref, wrap(err)
	}
	claim := Claim{ID: ref.ID, Found: true, Migration: Migration{From: ref.Legacy}}
	if claim.Migration.Sibling, err = s.Sibling(ctx, ref); err != nil {
		return ref, wrap(err)
	}
	entries := inv.Entries()
	var vanished []object.ObjMetadata
	if only != nil {
		entries = slices.DeleteFunc(entries, func(e Entry) bool { return !slices.Contains(only, e.Object) })
		for _, id := range only {
			if !inv.Has(id) {
				vanished = append(vanished, id)
			}
		}
	}
	pending, err := s.reownAll(ctx, ref, claim, entries, unrecordedOf(cm), opts)
	if err != nil {
		return ref, wrap(err)
	}
	for _, id := range vanished {
		if err := s.vanished(ctx, ref, claim, id); err != nil {
			pending.Objects = append(pending.Objects, id)
			pending.Errs = append(pending.Errs, err)
		}
	}
	if len(pending.Objects) > 0 {
		return ref, pending
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
		delete(cm.Annotations, UnrecordedAnnotation)
		var keys []string
		for key, uid := range cm.Data {
			if uid == "" && len(keys) < maxUnrecorded {
				keys = append(keys, key)
			}
		}
		if len(keys) > 0 {
			slices.Sort(keys)
			b, err := json.Marshal(keys)
			if err != nil {
				return err
			}
			cm.Annotations[UnrecordedAnnotation] = string(b)
		}
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
		delete(cm.Annotations, UnrecordedAnnotation)
		return s.c.Update(ctx, cm)
	})
	if err != nil {
		return fmt.Errorf("finish: %w", err)
	}
	return nil
}

// reownAll moves the owner annotation of the objects of entries that claim owns under the
// legacy ID to claim.ID. An entry recorded without UID whose object carries the legacy ID
// and is not contested gets its UID recorded first (recordUIDs), so it stays ours by
// Migration.Owns if its patch fails. pending lists the objects that still carry the legacy ID
// and are ours or contested; err is a crash point's error or a failed record, which stops
// it.
func (s *Store) reownAll(ctx context.Context, ref Ref, claim Claim, entries []Entry, unrecorded map[object.ObjMetadata]bool, opts MigrateOptions) (*PendingError, error) {
	outs := make([]reowned, len(entries))
	var n atomic.Int64
	var abort atomic.Pointer[error]
	var g errgroup.Group // workers never fail: errors go into outs
	g.SetLimit(max(opts.Concurrency, 1))
	for i, e := range entries {
		g.Go(func() error {
			if abort.Load() != nil {
				return nil
			}
			outs[i] = s.reown(ctx, ref, claim, e, unrecorded[e.Object], opts)
			if outs[i].done && opts.Hooks.AfterReown != nil {
				j := int(n.Add(1))
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
	if err := s.recordUIDs(ctx, ref, entries, outs); err != nil {
		return nil, err
	}
	pending := &PendingError{Ref: ref}
	for i, o := range outs {
		if o.err != nil {
			pending.Objects = append(pending.Objects, entries[i].Object)
			pending.Errs = append(pending.Errs, o.err)
		}
	}
	return pending, nil
}

// reowned is what reown did with one entry.
type reowned struct {
	done bool      // the patch landed
	uid  types.UID // the UID to record for an entry recorded without one ("": none)
	err  error     // the object still carries the legacy ID and is ours or contested
}

// recordUIDs stores the UIDs reown found for entries the ConfigMap recorded without one
// (only where it still records none), in one write.
func (s *Store) recordUIDs(ctx context.Context, ref Ref, entries []Entry, outs []reowned) error {
	fill := map[object.ObjMetadata]types.UID{}
	for i, o := range outs {
		if o.uid != "" {
			fill[entries[i].Object] = o.uid
		}
	}
	if len(fill) == 0 {
		return nil
	}
	_, err := s.Update(ctx, ref, func(stored *Inventory) *Inventory {
		out := stored.Clone()
		for id, uid := range fill {
			if stored.Has(id) && stored.UID(id) == "" {
				out.Add(Entry{Object: id, UID: uid})
			}
		}
		return out
	})
	if err != nil {
		return fmt.Errorf("record the UIDs of entries written without one: %w", err)
	}
	return nil
}

// reown moves the owner annotation of e's object from claim.Migration.From to claim.ID when
// the object is the inventory's under the legacy ID: Migration.Owns, or, for an entry the legacy
// ConfigMap recorded without UID (a write-ahead entry: created by a run that stopped before
// recording it, or never applied), the legacy ID on an object the other inventory of the
// legacy ID does not list (Sibling.Known and not Sibling.Lists), whose UID it then returns
// for recordUIDs. An object the sibling lists is contested and left as it is (a
// ContestedError). An object gone, re-annotated, replaced or taken over meanwhile is
// settled: not ours to take (or already done).
func (s *Store) reown(ctx context.Context, ref Ref, claim Claim, e Entry, legacyUnrecorded bool, opts MigrateOptions) reowned {
	mapping, err := s.c.RESTMapper().RESTMapping(e.Object.GroupKind)
	if meta.IsNoMatchError(err) {
		return reowned{} // its kind is gone, and so is the object
	}
	if err != nil {
		return reowned{err: fmt.Errorf("%s: %w", e.Object, err)}
	}
	read := func() (*metav1.PartialObjectMetadata, error) { return s.readMeta(ctx, e.Object, mapping) }
	var fill types.UID
	// legacyOwned says whether obj is still ours under the legacy ID, or why it cannot be
	// settled either way (contested, or no UID to go by and no sibling to check).
	legacyOwned := func(obj *metav1.PartialObjectMetadata) (bool, error) {
		owner := obj.GetAnnotations()[OwnerAnnotation]
		switch {
		case owner != claim.Migration.From:
			return false, nil
		case claim.Migration.Sibling.Lists(e.Object):
			return false, &ContestedError{Object: e.Object, Legacy: claim.Migration.From,
				ConfigMap: ref.String(), Sibling: claim.Migration.Sibling}
		case e.UID == "" && !legacyUnrecorded:
			// Written ahead under the new ID (UnrecordedAnnotation does not list it): the
			// legacy inventory never recorded the object, which needs adoption.
			return false, nil
		case e.UID == "" && !claim.Migration.Sibling.Known:
			return false, fmt.Errorf("%s carries %s=%s and this inventory recorded it without UID; the other inventory of that ID cannot be named, so it is not taken over: set the annotation to this inventory's ID by hand (%s=%s)",
				describeObject(e.Object), OwnerAnnotation, claim.Migration.From, OwnerAnnotation, claim.ID)
		case e.UID == "":
			fill = obj.GetUID()
			return true, nil
		}
		return claim.Migration.Owns(e.Object, owner, claim.Recorded(obj.GetUID(), e.UID)), nil
	}
	obj, err := read()
	if err != nil {
		return reowned{err: fmt.Errorf("%s: read: %w", e.Object, err)}
	}
	if obj == nil {
		return reowned{}
	}
	if ours, err := legacyOwned(obj); !ours {
		return reowned{err: err}
	}
	patch, err := OwnerPatch(obj.GetUID(), claim.Migration.From, claim.ID)
	if err != nil {
		return reowned{err: err}
	}
	var po []client.PatchOption
	if opts.FieldManager != "" {
		po = append(po, client.FieldOwner(opts.FieldManager))
	}
	perr := s.c.Patch(ctx, obj, client.RawPatch(types.JSONPatchType, patch), po...)
	if perr == nil {
		return reowned{done: true, uid: fill}
	}
	// A test operation failed (the object changed since it was read) or the patch was
	// refused: settled only if the API server shows it is no longer the legacy owner's.
	fill = ""
	cur, err := read()
	if err == nil && cur == nil {
		return reowned{}
	}
	if err == nil {
		if ours, err := legacyOwned(cur); !ours {
			return reowned{err: err}
		}
	}
	return reowned{uid: fill, err: fmt.Errorf("%s: owner annotation: %w", e.Object, perr)}
}

// readMeta reads the metadata of id's object; nil when it does not exist.
func (s *Store) readMeta(ctx context.Context, id object.ObjMetadata, mapping *meta.RESTMapping) (*metav1.PartialObjectMetadata, error) {
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(mapping.GroupVersionKind)
	err := s.c.Get(ctx, client.ObjectKey{Namespace: id.Namespace, Name: id.Name}, obj)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return obj, err
}

// vanished checks an object an earlier Migrate left pending (MigrateOptions.Only) that the
// ConfigMap no longer lists: settled only once it no longer carries the legacy ID (gone, or
// taken by its owner, e.g. the other inventory of the legacy ID after a person removed it
// from this one). Until then the migration stays marked, so the legacy ID keeps meaning
// something to this inventory and its status says why.
func (s *Store) vanished(ctx context.Context, ref Ref, claim Claim, id object.ObjMetadata) error {
	mapping, err := s.c.RESTMapper().RESTMapping(id.GroupKind)
	if meta.IsNoMatchError(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %w", id, err)
	}
	obj, err := s.readMeta(ctx, id, mapping)
	switch {
	case err != nil:
		return fmt.Errorf("%s: read: %w", id, err)
	case obj == nil || obj.GetAnnotations()[OwnerAnnotation] != claim.Migration.From:
		return nil
	}
	who := "its owner"
	if claim.Migration.Sibling.ConfigMap != "" {
		who = "its owner (the other inventory of that ID, ConfigMap " + claim.Migration.Sibling.ConfigMap + ", once it lists it)"
	}
	return fmt.Errorf("%s carries %s=%s and inventory %s no longer lists it: the migration waits for %s to take it over, or for a person to set the annotation",
		describeObject(id), OwnerAnnotation, claim.Migration.From, ref, who)
}

// unrecordedOf is the set UnrecordedAnnotation of cm lists (empty when absent or unreadable:
// then no entry without UID is taken over on the legacy ID's word).
func unrecordedOf(cm *corev1.ConfigMap) map[object.ObjMetadata]bool {
	var keys []string
	if err := json.Unmarshal([]byte(cm.Annotations[UnrecordedAnnotation]), &keys); err != nil {
		return nil
	}
	out := make(map[object.ObjMetadata]bool, len(keys))
	for _, k := range keys {
		if id, err := object.ParseObjMetadata(k); err == nil {
			out[id] = true
		}
	}
	return out
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
