package engine

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/converge-dev/converge/inventory"
)

// crashAt returns store hooks that crash at the named point: "part1" after the first new
// part, "head" before the head, "drop" after the head, before the dropped parts' deletion.
func crashAt(point string) inventory.StoreHooks {
	fail := func() error { return errCrash }
	switch point {
	case "part1":
		return inventory.StoreHooks{AfterPart: func(k int, _ string) error {
			if k == 1 {
				return errCrash
			}
			return nil
		}}
	case "head":
		return inventory.StoreHooks{BeforeHead: fail}
	case "drop":
		return inventory.StoreHooks{AfterHead: fail}
	}
	panic(point)
}

// TestSyncAcrossPartsCrashWriteAhead: the engine crashes in the write-ahead of a set that
// grows from a head and a part to a head and four parts, between writing two new parts, or
// between the parts and the head. I2: nothing new was applied and every object applied
// before is still inventoried. A restarted engine, whose repository dropped 50 objects
// applied before the crash and kept 150 of the new ones, prunes exactly those 50 and
// records exactly the desired set, with no unlisted part left.
func TestSyncAcrossPartsCrashWriteAhead(t *testing.T) {
	for _, point := range []string{"part1", "head"} {
		t.Run(point, func(t *testing.T) {
			first := partsHarness(t, nil, Hooks{}, inventory.StoreHooks{})
			opts := testOpts()
			before := first.objs(0, 100, "1")
			first.apply(opts, before...)
			if s := first.stored(); len(s.listed) == 0 {
				t.Fatal("100 objects took no part: the crash would not be between parts")
			}

			crash := partsHarness(t, first, Hooks{}, crashAt(point))
			_, err := crash.eng.Apply(crash.ctx, crash.set(crash.objs(0, 300, "1")...), opts)
			if !errors.Is(err, errCrash) {
				t.Fatalf("Apply error = %v, want the crash", err)
			}
			if crash.liveCM("obj-100") != nil || crash.liveCM("obj-299") != nil {
				t.Error("objects applied although the write-ahead crashed")
			}
			crash.ownedSubsetOfInventory()
			wantKeys(t, "inventory after the crash", crash.inventory(), ids(before)...)

			h := partsHarness(t, first, Hooks{}, inventory.StoreHooks{})
			desired := h.objs(50, 250, "1")
			res := h.apply(opts, desired...)
			pruned := 0
			for _, c := range res.Pruned {
				if c.Action == ActionPruned {
					pruned++
				}
			}
			if pruned != 50 || h.liveCM("obj-000") != nil || h.liveCM("obj-049") != nil {
				t.Errorf("pruned %d (obj-000 live: %v), want the 50 objects the repository dropped", pruned, h.liveCM("obj-000") != nil)
			}
			h.wantInventory("after the restart", ids(desired))
			h.ownedSubsetOfInventory()
		})
	}
}

// TestSyncAcrossPartsCrashRecord: the engine crashes while recording a prune that empties
// and replaces parts, between two new parts, between the parts and the head, or after the
// head before the dropped parts are deleted. I2 and I3: the inventory still holds every
// object that lives (a superset while the head was not written), and the restarted engine
// converges: the pruned objects leave the inventory, nothing is left unlisted.
func TestSyncAcrossPartsCrashRecord(t *testing.T) {
	for _, point := range []string{"part1", "head", "drop"} {
		t.Run(point, func(t *testing.T) {
			first := partsHarness(t, nil, Hooks{}, inventory.StoreHooks{})
			opts := testOpts()
			all := first.objs(0, 300, "1")
			first.apply(opts, all...)
			// Keep every third object: every part loses entries and is replaced.
			var kept []string
			keptObjs := all[:0:0]
			for i, u := range all {
				if i%3 == 0 {
					keptObjs = append(keptObjs, u)
				}
			}
			kept = ids(keptObjs)

			crash := partsHarness(t, first, Hooks{}, crashAt(point))
			_, err := crash.eng.Apply(crash.ctx, crash.set(keptObjs...), opts)
			if point == "drop" {
				// The head was written: the run's record took effect, the dropped parts are
				// left for the next write of the head.
				if !errors.Is(err, errCrash) {
					t.Fatalf("Apply error = %v, want the crash", err)
				}
				wantKeys(t, "inventory after the crash", crash.inventory(), kept...)
				if s := crash.stored(); len(s.unlisted) == 0 {
					t.Error("no dropped part left: the crash point is not between the head and the deletes")
				}
			} else {
				if !errors.Is(err, errCrash) {
					t.Fatalf("Apply error = %v, want the crash", err)
				}
				if crash.liveCM("obj-001") != nil {
					t.Fatal("obj-001 was not pruned before the record")
				}
				// The prune happened, its record did not: the inventory is what it was.
				wantKeys(t, "inventory after the crash", crash.inventory(), ids(all)...)
			}
			crash.ownedSubsetOfInventory()

			h := partsHarness(t, first, Hooks{}, inventory.StoreHooks{})
			keptObjs = keptObjs[:len(keptObjs)-10] // the repository dropped 10 more meanwhile
			res := h.apply(opts, keptObjs...)
			if got := actions(res.Pruned)[cmID(h.ns, "obj-297")]; got != ActionPruned {
				t.Errorf("obj-297: %q, want pruned", got)
			}
			h.wantInventory("after the restart", ids(keptObjs))
			h.ownedSubsetOfInventory()
		})
	}
}

// TestDeleteAcrossPartsCrash: a Delete of an inventory in parts crashes after the head
// dropped its parts and before they are deleted; the next Delete removes the rest, the
// head and every part, listed or not (I12).
func TestDeleteAcrossPartsCrash(t *testing.T) {
	first := partsHarness(t, nil, Hooks{}, inventory.StoreHooks{})
	opts := testOpts()
	first.apply(opts, first.objs(0, 300, "1")...)
	crash := partsHarness(t, first, Hooks{}, crashAt("drop"))
	if _, err := crash.eng.Delete(crash.ctx, crash.ref, DefaultDeleteOptions()); !errors.Is(err, errCrash) {
		t.Fatalf("Delete error = %v, want the crash", err)
	}
	if s := crash.stored(); s.head == nil || len(s.unlisted) == 0 {
		t.Fatalf("after the crash: head %v, unlisted parts %v; want the head and the dropped parts", s.head != nil, s.unlisted)
	}
	h := partsHarness(t, first, Hooks{}, inventory.StoreHooks{})
	if _, err := h.eng.Delete(h.ctx, h.ref, DefaultDeleteOptions()); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if s := h.stored(); s.head != nil || len(s.unlisted) > 0 {
		t.Errorf("after Delete: head %v, parts %v left", s.head != nil, s.unlisted)
	}
	if h.liveCM("obj-000") != nil || h.liveCM("obj-299") != nil {
		t.Error("objects survived Delete")
	}
}

// TestSyncMissingPart: a part deleted by hand stops Apply and Delete with an error naming
// the ConfigMap and saying what to do; nothing is applied, pruned or deleted on the basis
// of the rest. Restored (from a copy taken before), the next run prunes exactly what left
// the repository. Accepting the loss as the message says (the name removed from the
// head's annotation) lets runs go on without the part's objects.
func TestSyncMissingPart(t *testing.T) {
	h := partsHarness(t, nil, Hooks{}, inventory.StoreHooks{})
	opts := testOpts()
	all := h.objs(0, 300, "1")
	h.apply(opts, all...)
	lost := h.stored().listed[1]
	saved := lost.DeepCopy()
	if err := h.plain.Delete(h.ctx, lost); err != nil {
		t.Fatal(err)
	}

	desired := append(h.objs(0, 200, "1"), h.objs(300, 301, "1")...)
	res, err := h.eng.Apply(h.ctx, h.set(desired...), opts)
	var missing *inventory.MissingPartError
	if !errors.As(err, &missing) || missing.Part != lost.Name {
		t.Fatalf("Apply with a missing part: %v, want a MissingPartError naming %s", err, lost.Name)
	}
	for _, want := range []string{h.ns + "/" + lost.Name, "ConfigMap " + h.ref.String(), "Restore it", inventory.PartsAnnotation} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	if len(res.Pruned) > 0 || len(res.Changes) > 0 || h.liveCM("obj-299") == nil || h.liveCM("obj-300") != nil {
		t.Errorf("Apply with a missing part acted: %d changes, %d pruned, obj-299 live %v, obj-300 live %v",
			len(res.Changes), len(res.Pruned), h.liveCM("obj-299") != nil, h.liveCM("obj-300") != nil)
	}
	if _, err := h.eng.Delete(h.ctx, h.ref, DefaultDeleteOptions()); !errors.As(err, &missing) {
		t.Errorf("Delete with a missing part: %v, want a MissingPartError", err)
	}
	if h.liveCM("obj-000") == nil {
		t.Error("Delete with a missing part deleted objects")
	}

	// Restored from the copy, as the message says.
	restored := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: saved.Namespace, Name: saved.Name,
		Labels: saved.Labels, Annotations: saved.Annotations}, Data: saved.Data}
	if err := h.plain.Create(h.ctx, restored); err != nil {
		t.Fatal(err)
	}
	res = h.apply(opts, desired...)
	if n := len(res.Pruned); n != 100 {
		t.Errorf("after restoring the part: %d pruned, want 100", n)
	}
	h.wantInventory("after restoring the part", ids(desired))

	// The loss accepted: the name removed from the annotation.
	s := h.stored()
	lost = s.listed[0]
	var lostIDs []string
	for k := range lost.Data {
		lostIDs = append(lostIDs, k)
	}
	if err := h.plain.Delete(h.ctx, lost); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range s.listed[1:] {
		names = append(names, p.Name)
	}
	s.head.Annotations[inventory.PartsAnnotation] = strings.Join(names, ",")
	if len(names) == 0 {
		delete(s.head.Annotations, inventory.PartsAnnotation)
	}
	if err := h.plain.Update(h.ctx, s.head); err != nil {
		t.Fatal(err)
	}
	// The objects the lost part listed are still desired: the write-ahead records them again.
	h.apply(opts, desired...)
	h.wantInventory("after accepting the loss", ids(desired))
	if len(lostIDs) == 0 {
		t.Error("the second lost part listed nothing")
	}
}
