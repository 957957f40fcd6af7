package inventory

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cli-utils/pkg/object"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// An inventory larger than one ConfigMap holds (about 13,000 objects in 1 MiB) continues in
// part ConfigMaps. The inventory's own ConfigMap, the head, stays in the cli-utils format
// (its data are entries, its label the inventory ID) and names its parts in PartsAnnotation;
// each part holds more entries and carries PartOfLabel, never the inventory-id label, so no
// tool takes a part for an inventory of its own. An inventory that fits in one ConfigMap has
// no parts and no annotation: exactly the format of earlier versions.
//
// The crash rules (docs/reliability.md, I2, I3, I12):
//   - An entry never moves: it stays in the ConfigMap that first recorded it until it is
//     removed, so no write can lose an entry that another write has not yet recorded again.
//   - New entries go to the head while it has room, then to listed parts with room, then to
//     new parts. New parts get fresh random names and are written before the head lists
//     them; the head is written last, with its resourceVersion as precondition, so it is the
//     point where a write takes effect. A crash (or a lost race) before it leaves only
//     unlisted parts, which nothing reads; every object they name is still unapplied,
//     because Update returns only after the head is written.
//   - A part is never written twice: a part whose entries change is replaced by a new one
//     (and a part left empty by none), which the head lists instead; the old one is deleted
//     after the head is written, and a crash between leaves an unlisted part. So every
//     change goes through the head's resourceVersion: a concurrent writer that read the old
//     head conflicts and reads again.
//   - A listed part that is missing is an error naming it, never an empty part: its entries
//     would otherwise be forgotten and their objects never pruned.
//
// Unlisted parts (after a crash or a lost race) are garbage, never read: the next write of
// the head deletes those no writer can list any more (collectParts), and Delete deletes
// every part of the inventory, listed or not.

// PartsAnnotation on an inventory's head ConfigMap lists its part ConfigMaps, by name, in
// the same namespace, comma-separated.
const PartsAnnotation = "converge.dev/inventory-parts"

// PartOfLabel on a part ConfigMap names the inventory it continues: a hash of the inventory
// ID (a label value is at most 63 characters; the ID may be longer).
const PartOfLabel = "converge.dev/inventory-part-of"

// defaultPartBytes is how much entry data one ConfigMap holds before the next part: under
// the API server's 1 MiB limit on a ConfigMap's data (entryBytes already counts every UID), so
// that 50,000 objects take six ConfigMaps (each read is one GET of a no-op reconcile).
const defaultPartBytes = 900 << 10

// entryBytes is what an entry counts toward a ConfigMap's share: its key and a UID, written
// now or later (so an entry recorded before its object's UID is known never overflows its
// ConfigMap when the UID comes).
func entryBytes(id object.ObjMetadata) int { return len(id.String()) + 40 }

// partOf is the PartOfLabel value of the parts of the inventory id.
func partOf(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])[:40]
}

// stored is an inventory as read: its head and its listed parts, in order.
type stored struct {
	head  *corev1.ConfigMap
	parts []*corev1.ConfigMap
}

// readParts reads the parts the head lists: each must exist and continue this inventory.
func (s *Store) readParts(ctx context.Context, ref Ref, head *corev1.ConfigMap) ([]*corev1.ConfigMap, error) {
	names := partNames(head)
	parts := make([]*corev1.ConfigMap, 0, len(names))
	for _, name := range names {
		cm := &corev1.ConfigMap{}
		err := s.c.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: name}, cm)
		if apierrors.IsNotFound(err) && s.headMoved(ctx, ref, head) {
			// A writer replaced the part after we read the head: read again.
			return nil, apierrors.NewConflict(corev1.Resource("configmaps"), ref.Name, fmt.Errorf("inventory %s: part %s replaced while read", ref, name))
		}
		if apierrors.IsNotFound(err) {
			return nil, &MissingPartError{Ref: ref, Part: name}
		}
		if err != nil {
			return nil, fmt.Errorf("inventory %s: read part %s: %w", ref, name, err)
		}
		if cm.Labels[PartOfLabel] != partOf(ref.ID) {
			return nil, fmt.Errorf("inventory %s: ConfigMap %s, listed as its part, is not labelled %s=%s", ref, name, PartOfLabel, partOf(ref.ID))
		}
		parts = append(parts, cm)
	}
	return parts, nil
}

// MissingPartError is the error of a read of an inventory whose head lists a part ConfigMap
// that does not exist (deleted by hand, or by a tool that cleans up ConfigMaps). The objects
// that part listed are unknown, so the read fails rather than return the rest: an inventory
// read without them would let an Apply record it and forget those objects for good (never
// pruned, not deleted with their owner), silently. Nothing is applied, pruned or deleted for
// the inventory until a person restores the part or accepts the loss; the message says how.
//
// No copy recovers the part automatically: the copy a Sync keeps in its status holds at
// most 5,000 entries, and an inventory has parts only beyond about 9,000, so a copy can
// never be shown to cover what the part listed.
type MissingPartError struct {
	// Ref is the inventory, whose head ConfigMap lists the part.
	Ref Ref
	// Part is the name of the missing part ConfigMap, in Ref.Namespace.
	Part string
}

func (e *MissingPartError) Error() string {
	return fmt.Sprintf("inventory %s: its part ConfigMap %s/%s is missing, so the objects it listed are unknown: "+
		"nothing is applied, pruned or deleted for this inventory until it is back. "+
		"Restore it from a backup (same name and namespace, label %s=%s), or accept the loss: "+
		"remove %s from the annotation %s of ConfigMap %s; the objects it listed are then no longer tracked "+
		"(neither pruned nor deleted with their owner: delete by hand those that left the repository)",
		e.Ref, e.Ref.Namespace, e.Part, PartOfLabel, partOf(e.Ref.ID), e.Part, PartsAnnotation, e.Ref)
}

// headMoved reports whether the head of ref is no longer the one read (written again or
// gone); an error reading it counts as moved, so the caller reads again.
func (s *Store) headMoved(ctx context.Context, ref Ref, head *corev1.ConfigMap) bool {
	cur := &corev1.ConfigMap{}
	err := s.c.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, cur)
	return err != nil || cur.UID != head.UID || cur.ResourceVersion != head.ResourceVersion
}

// partNames are the names the head's PartsAnnotation lists.
func partNames(head *corev1.ConfigMap) []string {
	v := head.Annotations[PartsAnnotation]
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// decodeStored is decode over the head and its parts, into an inventory sized for all of
// them (read on every reconcile: growing a map of 50,000 entries step by step costs more
// than filling it).
func decodeStored(ref Ref, st stored) (*Inventory, error) {
	n := len(st.head.Data)
	for _, p := range st.parts {
		n += len(p.Data)
	}
	inv, err := decode(ref, st.head, n)
	if err != nil {
		return nil, err
	}
	for _, p := range st.parts {
		if err := decodeInto(ref, inv, p); err != nil {
			return nil, err
		}
	}
	return inv, nil
}

// layout places the entries of inv in the head and parts of st (see the crash rules above):
// it returns the data of the head and of each part to write, in order, existing parts first
// (nil data: the part is dropped) and then new ones.
func layout(inv *Inventory, st stored, partBytes int) (head map[string]string, parts []map[string]string) {
	current := []*corev1.ConfigMap{st.head}
	current = append(current, st.parts...)
	datas := make([]map[string]string, len(current))
	used := make([]int, len(current))
	placed := map[object.ObjMetadata]bool{}
	for i, cm := range current {
		datas[i] = map[string]string{}
		if cm == nil {
			continue
		}
		for key := range cm.Data {
			id, err := object.ParseObjMetadata(key)
			if err != nil || placed[id] || !inv.Has(id) {
				continue
			}
			placed[id] = true
			datas[i][id.String()] = string(inv.UID(id))
			used[i] += entryBytes(id)
		}
	}
	next := 0
	for _, e := range inv.Entries() { // sorted: new parts fill in a stable order
		if placed[e.Object] {
			continue
		}
		size := entryBytes(e.Object)
		for next < len(datas) && used[next]+size > partBytes && used[next] > 0 {
			next++
		}
		if next == len(datas) {
			datas, used = append(datas, map[string]string{}), append(used, 0)
		}
		datas[next][e.Object.String()] = string(e.UID)
		used[next] += size
	}
	for i := 1; i < len(datas); i++ {
		if len(datas[i]) == 0 {
			datas[i] = nil
		}
	}
	return datas[0], datas[1:]
}

// writeParts writes the parts of a layout. A part is never changed in place: a listed part
// whose entries change is written again under a fresh name, and the old one is dropped once
// the head no longer lists it. So every change of the inventory changes the head, whose
// resourceVersion makes a writer that read before it conflict and read again (a part
// updated in place would let such a writer, which sees that part as unchanged, write the
// head over it and lose the change). It returns the names the head must list and the listed
// parts to delete once it no longer does.
func (s *Store) writeParts(ctx context.Context, ref Ref, st stored, parts []map[string]string) (names []string, drop []*corev1.ConfigMap, err error) {
	created := 0
	for i, data := range parts {
		if i < len(st.parts) {
			cm := st.parts[i]
			if data != nil && maps.Equal(cm.Data, data) && len(cm.BinaryData) == 0 {
				names = append(names, cm.Name)
				continue
			}
			drop = append(drop, cm)
		}
		if data == nil {
			continue
		}
		name, err := newPartName(ref)
		if err != nil {
			return nil, nil, err
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Namespace: ref.Namespace, Name: name, Labels: map[string]string{PartOfLabel: partOf(ref.ID)},
			Annotations: map[string]string{partBaseAnnotation: baseOf(st)},
		}, Data: data}
		if err := s.c.Create(ctx, cm); err != nil {
			return nil, nil, err
		}
		created++
		if h := s.hooks.AfterPart; h != nil {
			if err := h(created, name); err != nil {
				return nil, nil, fmt.Errorf("aborted by hook: %w", err)
			}
		}
		names = append(names, name)
	}
	return names, drop, nil
}

// partBaseAnnotation on a part ConfigMap is the resourceVersion of the head its writer read
// ("none": there was no head). The writer's head write carries that resourceVersion as
// its precondition, so once the head is at another resourceVersion the part can never be
// listed: collectParts deletes it.
const partBaseAnnotation = "converge.dev/inventory-part-base"

// baseOf is the partBaseAnnotation value of the parts written over st.
func baseOf(st stored) string {
	if st.head == nil {
		return "none"
	}
	return st.head.ResourceVersion
}

// collectParts deletes the garbage parts of ref: ConfigMaps labelled as its parts that head
// (just written) does not list and that no writer can list any more (their base is not
// head's resourceVersion: a writer still under way that read this head keeps its parts). A
// crash between creating parts and writing the head, or between writing the head and
// deleting the parts it dropped, leaves such parts; the next write of the head removes
// them. It costs one LIST, sent only by writes of an inventory that has or had parts. It is
// best effort: a failure (a role without "list configmaps") leaves the garbage, which
// nothing reads. Parts without a base (written by the version before it) are left alone.
func (s *Store) collectParts(ctx context.Context, ref Ref, head *corev1.ConfigMap) {
	all, ok := s.listParts(ctx, ref)
	if !ok {
		return
	}
	listed := map[string]bool{}
	for _, n := range partNames(head) {
		listed[n] = true
	}
	var garbage []*corev1.ConfigMap
	for _, cm := range all {
		base, ok := cm.Annotations[partBaseAnnotation]
		if listed[cm.Name] || !ok || base == head.ResourceVersion || !isPartName(ref, cm.Name) ||
			!olderThan(cm.ResourceVersion, head.ResourceVersion) {
			continue
		}
		garbage = append(garbage, cm)
	}
	s.dropParts(ctx, garbage)
}

// olderThan reports whether resourceVersion a was written before b: a part written before
// head (and not listed by it) can never be listed again, while one written after it may
// belong to a newer head (this collection ran late, another writer went on). Parts are
// never written twice, so a part's resourceVersion is its creation. Kubernetes compares
// resourceVersions as integers (since 1.35, KEP-5504); anything else is not collected.
func olderThan(a, b string) bool {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	return errA == nil && errB == nil && x < y
}

// isPartName reports whether name has the shape newPartName gives ref's parts: a
// ConfigMap that merely carries the label (another Sync's render, a tenant's hand) is
// never collected.
func isPartName(ref Ref, name string) bool {
	i := strings.LastIndex(name, "-part-")
	if i < 0 || len(name)-i != len("-part-")+8 || !strings.HasPrefix(ref.Name, name[:i]) {
		return false
	}
	_, err := hex.DecodeString(name[i+len("-part-"):])
	return err == nil
}

// listParts lists the ConfigMaps labelled as parts of ref, listed by its head or not; ok is
// false when the LIST failed (logged: the caller goes on without collecting).
func (s *Store) listParts(ctx context.Context, ref Ref) (parts []*corev1.ConfigMap, ok bool) {
	list := &corev1.ConfigMapList{}
	if err := s.c.List(ctx, list, client.InNamespace(ref.Namespace), client.MatchingLabels{PartOfLabel: partOf(ref.ID)}); err != nil {
		logr.FromContextOrDiscard(ctx).Info("inventory parts not collected", "inventory", ref.String(), "err", err.Error())
		return nil, false
	}
	parts = make([]*corev1.ConfigMap, len(list.Items))
	for i := range list.Items {
		parts[i] = &list.Items[i]
	}
	return parts, true
}

// callStoreHook runs a crash point of StoreHooks.
func callStoreHook(h func() error) error {
	if h == nil {
		return nil
	}
	if err := h(); err != nil {
		return fmt.Errorf("aborted by hook: %w", err)
	}
	return nil
}

// newPartName is <head>-part-<8 random hex>, the head's name shortened so that the whole
// stays a valid ConfigMap name.
func newPartName(ref Ref) (string, error) {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	suffix := "-part-" + hex.EncodeToString(b)
	base := ref.Name
	if max := 253 - len(suffix); len(base) > max {
		base = strings.TrimRight(base[:max], ".-")
	}
	return base + suffix, nil
}

// setParts records names in the head's PartsAnnotation (none: no annotation).
func setParts(head *corev1.ConfigMap, names []string) {
	if len(names) == 0 {
		delete(head.Annotations, PartsAnnotation)
		return
	}
	if head.Annotations == nil {
		head.Annotations = map[string]string{}
	}
	head.Annotations[PartsAnnotation] = strings.Join(names, ",")
}

// sameParts reports whether the head already lists names.
func sameParts(head *corev1.ConfigMap, names []string) bool {
	return slices.Equal(partNames(head), names)
}

// dropParts deletes parts the head no longer lists; a failure leaves an unlisted part,
// which nothing reads.
func (s *Store) dropParts(ctx context.Context, parts []*corev1.ConfigMap) {
	for _, cm := range parts {
		uid := cm.UID
		_ = s.c.Delete(ctx, cm, client.Preconditions{UID: &uid})
	}
}
