package inventory

import (
	"context"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/cli-utils/pkg/object"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// IDLabel is the cli-utils label that names the inventory a ConfigMap holds.
const IDLabel = "cli-utils.sigs.k8s.io/inventory-id"

// Store reads and writes inventories as ConfigMaps in the cli-utils format. It must be
// given an uncached client: every read, including the re-read after a conflict, goes to
// the API server.
type Store struct {
	c client.Client
	// partBytes is the entry data one ConfigMap holds before the next part (parts.go).
	partBytes int
	hooks     StoreHooks
}

// StoreOptions configure a Store beyond its client.
type StoreOptions struct {
	// PartBytes is how much entry data one ConfigMap holds before the inventory continues in
	// a part ConfigMap (parts.go). Zero means the default, 900 KiB (about 9,000 objects);
	// tests set it small so that a few hundred objects span several parts.
	PartBytes int
	// Hooks are test-only crash points between the ConfigMap writes of an Update.
	Hooks StoreHooks
}

// StoreHooks are crash points of Update, for tests: a hook that returns an error stops the
// Update at once, as a crash there would (the error is returned, wrapped). Nil hooks are
// skipped.
type StoreHooks struct {
	// AfterPart runs after the k-th new part ConfigMap of an attempt was created (k counts
	// from 1), before the next part and the head.
	AfterPart func(k int, name string) error
	// BeforeHead runs once every new part of an attempt exists, before the head is written.
	BeforeHead func() error
	// AfterHead runs after the head was written, before the parts it no longer lists are
	// deleted.
	AfterHead func() error
}

// NewStore returns a Store that uses c, which must read from the API server, not a cache.
func NewStore(c client.Client) *Store {
	return NewStoreWithOptions(c, StoreOptions{})
}

// NewStoreWithOptions is NewStore with opts.
func NewStoreWithOptions(c client.Client, opts StoreOptions) *Store {
	if opts.PartBytes <= 0 {
		opts.PartBytes = defaultPartBytes
	}
	return &Store{c: c, partBytes: opts.PartBytes, hooks: opts.Hooks}
}

// Get returns the stored inventory of ref. A missing ConfigMap is an empty inventory, not
// an error. A ConfigMap whose inventory-id label differs from ref.ID is an error: it
// belongs to another set (or, labelled ref.Legacy, is not migrated yet: ErrNotMigrated).
func (s *Store) Get(ctx context.Context, ref Ref) (*Inventory, error) {
	inv, _, err := s.Lookup(ctx, ref)
	return inv, err
}

// Lookup is Get that also returns what the ConfigMap says about ownership (Claim): whether
// it exists (a missing ConfigMap and an empty one mean the same set, but only a missing one
// was lost, deleted by hand or by the deletion of its namespace, and may be recovered from a
// copy kept elsewhere), and whether its migration from ref.Legacy is under way
// (Claim.Migration, legacy_claim.go).
func (s *Store) Lookup(ctx context.Context, ref Ref) (*Inventory, Claim, error) {
	claim := Claim{ID: ref.ID}
	var st stored
	// A part replaced between reading the head and reading it is a conflict: read again.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() (err error) {
		st, err = s.read(ctx, ref)
		return err
	})
	if err != nil {
		return nil, claim, err
	}
	if st.head == nil {
		return &Inventory{}, claim, nil
	}
	inv, err := decodeStored(ref, st)
	if err != nil {
		return nil, claim, err
	}
	claim.Found = true
	if len(st.parts) == 0 {
		claim.Version = st.head.ResourceVersion
	}
	if claim.Migration, err = s.migrationOf(ctx, ref, st.head); err != nil {
		return nil, claim, err
	}
	return inv, claim, nil
}

// Version reads the resourceVersion of ref's ConfigMap from the API server (its metadata
// only); "" when it does not exist. Every write of an inventory without parts changes it, so
// an unchanged version means the inventory a Lookup returned with it (Claim.Version, set
// only for such an inventory) is still what is stored.
func (s *Store) Version(ctx context.Context, ref Ref) (string, error) {
	if err := checkRef(ref); err != nil {
		return "", err
	}
	head := &metav1.PartialObjectMetadata{}
	head.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	err := s.c.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, head)
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("inventory %s: read: %w", ref, err)
	}
	return head.ResourceVersion, nil
}

// Write stores inv as the inventory of ref, whatever is stored now. See Update.
func (s *Store) Write(ctx context.Context, ref Ref, inv *Inventory) error {
	_, err := s.Update(ctx, ref, func(*Inventory) *Inventory { return inv })
	return err
}

// Update stores mutate(stored) as the inventory of ref and returns it. Every attempt reads
// the ConfigMap (and its parts, parts.go) from the API server (never a cache), writes the
// parts, then creates the ConfigMap when missing, or updates it with the read
// resourceVersion as a precondition; on a conflict it re-reads and calls mutate again
// (retry.RetryOnConflict), so a concurrent writer's change is seen, not overwritten blindly.
// When the result equals what is stored it sends nothing, so a no-op reconcile issues no
// write. mutate must not keep or modify its argument.
func (s *Store) Update(ctx context.Context, ref Ref, mutate func(stored *Inventory) *Inventory) (*Inventory, error) {
	var result *Inventory
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		st, err := s.read(ctx, ref)
		if err != nil {
			return err
		}
		inv := &Inventory{}
		if st.head != nil {
			if inv, err = decodeStored(ref, st); err != nil {
				return err
			}
		}
		result = mutate(inv)
		data, parts := layout(result, st, s.partBytes)
		names, drop, err := s.writeParts(ctx, ref, st, parts)
		if err != nil {
			return err
		}
		cm := st.head
		if cm != nil && maps.Equal(cm.Data, data) && len(cm.BinaryData) == 0 && sameParts(cm, names) {
			return nil
		}
		if err := callStoreHook(s.hooks.BeforeHead); err != nil {
			return err
		}
		hadParts := len(st.parts) > 0 || len(names) > 0
		if cm == nil {
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
				Namespace: ref.Namespace, Name: ref.Name,
				Labels: map[string]string{IDLabel: ref.ID},
			}, Data: data}
			setParts(cm, names)
			err := s.c.Create(ctx, cm)
			if apierrors.IsAlreadyExists(err) {
				// Someone created it between our read and our create: re-read and retry.
				return apierrors.NewConflict(corev1.Resource("configmaps"), ref.Name, err)
			}
			if err != nil {
				return err
			}
		} else {
			cm.Data = data
			cm.BinaryData = nil
			setParts(cm, names)
			if err := s.c.Update(ctx, cm); err != nil { // carries cm.ResourceVersion: optimistic concurrency
				return err
			}
		}
		if err := callStoreHook(s.hooks.AfterHead); err != nil {
			return err
		}
		s.dropParts(ctx, drop)
		if hadParts {
			s.collectParts(ctx, ref, cm)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("inventory %s: write: %w", ref, err)
	}
	return result, nil
}

// Delete removes the inventory ConfigMap of ref, the parts it lists, and the parts it does
// not list any more (left by a crash). A missing ConfigMap is not an error. It is for an
// inventory whose objects are deleted or released (Engine.Delete, Engine.Abandon): what it
// lists is not tracked any more once Delete begins.
//
// Every write is conditional on the version of the head it read, so a head another writer
// changed meanwhile (an entry added: an object created under this inventory) is not deleted
// blind: Delete fails with a conflict (apierrors.IsConflict) and deletes nothing more; the
// caller reads the inventory again and deletes or releases what it lists now. Delete does
// not retry by itself: a retry that read again here would delete the new entries unseen.
// opts.Expect closes the same window from the caller's read on.
func (s *Store) Delete(ctx context.Context, ref Ref, opts DeleteOptions) error {
	cm, err := s.get(ctx, ref)
	if err != nil || cm == nil {
		return err
	}
	if id := cm.Labels[IDLabel]; id != ref.ID {
		return fmt.Errorf("inventory %s: delete: %w", ref, foreign(ref, id))
	}
	var parts []*corev1.ConfigMap
	for _, name := range partNames(cm) {
		part := &corev1.ConfigMap{}
		err := s.c.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: name}, part)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("inventory %s: delete part %s: %w", ref, name, err)
		}
		if part.Labels[PartOfLabel] != partOf(ref.ID) {
			// The annotation names a ConfigMap that is not ours: never delete it.
			return fmt.Errorf("inventory %s: delete: ConfigMap %s, listed as its part, is not labelled %s=%s", ref, name, PartOfLabel, partOf(ref.ID))
		}
		parts = append(parts, part)
	}
	if opts.Expect != nil {
		inv, err := decodeStored(ref, stored{head: cm, parts: parts})
		if err != nil {
			return err
		}
		if !inv.Equal(opts.Expect) {
			return fmt.Errorf("inventory %s: delete: %w", ref, apierrors.NewConflict(corev1.Resource("configmaps"), ref.Name,
				fmt.Errorf("it lists %d objects, not the %d the caller read: another writer changed it; read it again", inv.Len(), opts.Expect.Len())))
		}
	}
	if len(partNames(cm)) > 0 {
		// Detach the parts, under the version read, before deleting them: a head that
		// lists a missing part cannot be read (MissingPartError), so the parts must not go
		// while a head naming them may stay (a crash here, or a head changed meanwhile,
		// which keeps its unchanged parts). A crash after leaves a head without parts
		// (what they listed was released already) and unlisted parts, collected below on
		// the next Delete.
		cm = cm.DeepCopy()
		setParts(cm, nil)
		if err := s.c.Update(ctx, cm); err != nil {
			return fmt.Errorf("inventory %s: delete: detach its parts: %w", ref, err)
		}
		for _, part := range parts {
			puid := part.UID
			if err := s.c.Delete(ctx, part, client.Preconditions{UID: &puid}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("inventory %s: delete part %s: %w", ref, part.Name, err)
			}
		}
	}
	uid, rv := cm.UID, cm.ResourceVersion
	err = s.c.Delete(ctx, cm, client.Preconditions{UID: &uid, ResourceVersion: &rv})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("inventory %s: delete: %w", ref, err)
	}
	// Then the parts it does not list (left by a crash): best effort, as collectParts, and
	// only ConfigMaps named as our parts are: a label alone is anyone's to set (another Sync
	// of the namespace may apply a look-alike), and what it marks is not ours to delete.
	// After the head: while it stood, a writer could be adding parts not listed yet.
	if parts, ok := s.listParts(ctx, ref); ok {
		s.dropParts(ctx, slices.DeleteFunc(parts, func(p *corev1.ConfigMap) bool {
			// A part written after the head's last write may be a new head's: one re-created
			// after the delete (parts based on "none"), or a later writer's based on that.
			// Such a part its writer never lists stays until the inventory is written again.
			return !isPartName(ref, p.Name) || !olderThan(p.ResourceVersion, rv)
		}))
	}
	return nil
}

// DeleteOptions are the conditions of a Store.Delete.
type DeleteOptions struct {
	// Expect, when set, is the inventory the caller emptied or released (what it read,
	// less what it deleted): the ConfigMap is deleted only while it lists exactly that, so
	// an entry another writer added after the caller's read is not deleted unseen (Delete
	// fails with a conflict instead). Nil deletes whatever the inventory lists.
	Expect *Inventory
}

// checkRef refuses an incomplete reference before any request.
func checkRef(ref Ref) error {
	if ref.Name == "" || ref.Namespace == "" || ref.ID == "" {
		return fmt.Errorf("inventory %s: namespace, name and id are required", ref)
	}
	return nil
}

// get reads the ConfigMap of ref; nil without error when it does not exist.
func (s *Store) get(ctx context.Context, ref Ref) (*corev1.ConfigMap, error) {
	if err := checkRef(ref); err != nil {
		return nil, err
	}
	cm := &corev1.ConfigMap{}
	err := s.c.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, cm)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("inventory %s: read: %w", ref, err)
	}
	return cm, nil
}

// foreign is the error about a ConfigMap of ref that holds the inventory id of another
// owner, named in words (Describe), or of ref itself under its legacy ID (notMigrated).
func foreign(ref Ref, id string) error {
	if err := notMigrated(ref, id); err != nil {
		return err
	}
	if id == "" {
		return fmt.Errorf("the ConfigMap has no label %s: it is not an inventory; rename the inventory or remove the ConfigMap", IDLabel)
	}
	return fmt.Errorf("the ConfigMap holds the inventory of %s, not of %s; choose another inventory name", Describe(id), Describe(ref.ID))
}

// decode parses the data keys of cm (ns_name_group_kind) and their UID values: the head's
// entries only (see decodeStored), into an inventory with room for size entries.
func decode(ref Ref, cm *corev1.ConfigMap, size int) (*Inventory, error) {
	if id := cm.Labels[IDLabel]; id != ref.ID {
		return nil, fmt.Errorf("inventory %s: %w", ref, foreign(ref, id))
	}
	inv := NewSized(size)
	return inv, decodeInto(ref, inv, cm)
}

// decodeInto adds the entries of cm, a head or a part, to inv.
func decodeInto(ref Ref, inv *Inventory, cm *corev1.ConfigMap) error {
	for key, uid := range cm.Data {
		id, err := object.ParseObjMetadata(key)
		if err != nil {
			if overwritten(ref, cm) {
				return &OverwrittenError{Ref: ref, Key: key}
			}
			return fmt.Errorf("inventory %s: ConfigMap %s: entry %q: %w", ref, cm.Name, key, err)
		}
		inv.Add(Entry{Object: id, UID: types.UID(uid)})
	}
	return nil
}

// read reads the inventory of ref: its head and the parts the head lists (no head: the
// zero stored, without error). A head that holds another ID is an error (foreign).
func (s *Store) read(ctx context.Context, ref Ref) (stored, error) {
	head, err := s.get(ctx, ref)
	if err != nil || head == nil {
		return stored{}, err
	}
	return s.readFrom(ctx, ref, head)
}

// readFrom is read of the head already read.
func (s *Store) readFrom(ctx context.Context, ref Ref, head *corev1.ConfigMap) (stored, error) {
	if id := head.Labels[IDLabel]; id != ref.ID {
		return stored{}, fmt.Errorf("inventory %s: %w", ref, foreign(ref, id))
	}
	parts, err := s.readParts(ctx, ref, head)
	if err != nil {
		return stored{}, err
	}
	return stored{head: head, parts: parts}, nil
}
