package engine

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/cli-utils/pkg/object"

	"github.com/converge-dev/converge/inventory"
)

// The engine's side of the legacy-ID migration (inventory.Ref.Legacy): what an apply, a
// prune, a delete and a release decide about an object that still carries the ID earlier
// versions gave its inventory. Engine.Migrate (legacy_migrate.go) runs before them as a
// one-shot step; this file holds what they must still honour while a migration is under way
// or an object carries the legacy ID. Removed in v0.2 with the migration: owns becomes
// inventory.Claim.Owns and every other function here goes.

// owns is the ownership every apply, prune, delete and release decides by: the object's
// owner annotation is the inventory's ID (inventory.Claim.Owns), or, while a migration from
// the legacy ID is under way, an object carrying the legacy ID with the UID the ConfigMap
// recorded that the other inventory of that ID does not list (inventory.Migration.Owns).
// Callers that delete or release still require the recorded UID (I1).
func owns(claim inventory.Claim, id object.ObjMetadata, annotation string, uid, recorded types.UID) bool {
	return claim.Owns(annotation) || claim.Migration.Owns(id, annotation, claim.Recorded(uid, recorded))
}

// mayTakeOverLegacy is mayTakeOver for an object that carries the inventory's legacy ID but
// is not ours by owns: its ConfigMap did not record it (the inventory was lost before the
// upgrade, or someone else wrote the annotation). It is not ours on the annotation's word
// alone, anyone may write it. When the other inventory that shared the legacy ID lists it,
// it may be that one's: never taken over (I11), even with adoption; a person decides.
// Otherwise adoption takes it.
func (r *applyRun) mayTakeOverLegacy(ctx context.Context, it *item, owner string) error {
	sib, err := r.sibling(ctx)
	if err != nil {
		return err
	}
	if sib.Lists(it.id) {
		return terminal(fmt.Errorf("%w: %w", ErrNotAdopted, &inventory.ContestedError{
			Object: it.id, Legacy: owner, ConfigMap: r.ref.String(), Sibling: sib}))
	}
	if !r.opts.Adopt {
		return terminal(notRecordedError(it.id, owner, r.ref))
	}
	if !sib.Known {
		return terminal(unknownSiblingError(it.id, owner, r.ref))
	}
	return nil
}

// legacyOwner judges an object that carries the inventory's legacy ID without being ours by
// owns (mayTakeOverLegacy). A refused object keeps the inventory entry it had, with the UID
// it had: dropping it would tell the other inventory of that ID that this one gave it up, and
// that one's migration would take it.
func (r *applyRun) legacyOwner(ctx context.Context, it *item, owner string, out outcome) (_ outcome, ok bool) {
	if err := r.mayTakeOverLegacy(ctx, it, owner); err != nil {
		out.track, out.uid = r.old.Has(it.id), r.old.UID(it.id)
		return failed(out, err), false
	}
	return out, true
}

// siblingRead is what the other inventory that shared the run's legacy ID lists, read once
// per run and only when an adoption needs it.
type siblingRead struct {
	once sync.Once
	sib  inventory.Sibling
	err  error
}

// sibling is what the other inventory that shared the run's legacy ID lists
// (inventory.Sibling): the claim's while a migration is under way, else read once.
func (r *applyRun) sibling(ctx context.Context) (inventory.Sibling, error) {
	if r.claim.Migration.From != "" {
		return r.claim.Migration.Sibling, nil
	}
	s := &r.legacySibling
	s.once.Do(func() { s.sib, s.err = r.e.store.Sibling(ctx, r.ref) })
	return s.sib, s.err
}

// pruneContested is a prune's verdict on an entry the migration finds contested
// (inventory.Migration.Contested): never deleted; given up to the other inventory of the
// legacy ID when this inventory is being removed (removing), else kept in it until a person
// removes it from one of the two.
func pruneContested(c Change, m inventory.Migration, owner string, removing bool) (Change, verdict) {
	if removing {
		c.Message = fmt.Sprintf("not deleted: it carries the legacy ID %q and the other inventory of that ID (ConfigMap %s) lists it too; "+
			"given up to it with this inventory", owner, m.Sibling.ConfigMap)
		return c, drop
	}
	c.Message = fmt.Sprintf("not deleted: it carries the legacy ID %q and the other inventory of that ID (ConfigMap %s) lists it too; "+
		"kept in the inventory until a person removes it from one of the two", owner, m.Sibling.ConfigMap)
	return c, keep
}

// notRecordedError is the error of an object that carries ref's legacy ID while ref's
// inventory does not record it with its UID: anyone may write that annotation, so a person
// adopts the object or lets it go. It matches ErrNotAdopted.
func notRecordedError(id object.ObjMetadata, owner string, ref inventory.Ref) error {
	return fmt.Errorf("%w: %s carries %s=%s, this inventory's legacy ID, but %s does not record it; "+
		"adopt it (Sync spec.adopt, converge apply --adopt) or remove the annotation: %s",
		ErrNotAdopted, Describe(id), inventory.OwnerAnnotation, owner, ref, kubectlUnannotate(id))
}

// kubectlUnannotate is the kubectl command that removes the owner annotation from id.
func kubectlUnannotate(id object.ObjMetadata) string {
	resource := strings.ToLower(id.GroupKind.Kind)
	if id.GroupKind.Group != "" {
		resource += "." + id.GroupKind.Group
	}
	kubectl := "kubectl annotate " + resource + " " + id.Name
	if id.Namespace != "" {
		kubectl += " -n " + id.Namespace
	}
	return kubectl + " " + inventory.OwnerAnnotation + "-"
}

// unknownSiblingError is the error of an adoption of an object that carries ref's legacy ID
// when the other inventory that shared that ID cannot be named (inventory.Sibling.Known is
// false: a Sync name over 230 characters, whose inventory ConfigMap name is hashed), so
// nothing says the object is not that one's: adoption does not take it on the legacy ID's
// word; a person who knows removes the annotation, and the next adoption takes it.
func unknownSiblingError(id object.ObjMetadata, owner string, ref inventory.Ref) error {
	return fmt.Errorf("%w: %s carries %s=%s, the ID earlier versions gave both to this inventory and to the \"converge apply --inventory\" of the same name, "+
		"whose ConfigMap cannot be named from %s; adoption does not take it on that ID's word: if it is not the other's, remove the annotation by hand (%s) and adopt it",
		ErrNotAdopted, Describe(id), inventory.OwnerAnnotation, owner, ref, kubectlUnannotate(id))
}
