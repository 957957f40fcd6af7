package engine

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/e2e/fault"
	"github.com/converge-dev/converge/inventory"
)

// runHeads returns a watch of the inventory heads on the test cluster (its requests are not
// the engine's: they bypass h.rt), running until the test ends.
func runHeads(t *testing.T) *inventory.Heads {
	t.Helper()
	hs, err := inventory.NewHeads(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { hs.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return hs
}

// TestHeadsNoOpSendsNothing: with a watch of the inventory heads, a no-op reconcile (the
// readiness wait included) sends no request at all: it starts from the inventory it read
// last, since the watch shows the ConfigMap unchanged. Without Heads the same run sends one,
// the inventory's GET (TestWatchNoOpSendsNothing).
func TestHeadsNoOpSendsNothing(t *testing.T) {
	h := newHarness(t, Hooks{})
	h.useWatchEngine(Options{Heads: runHeads(t)})
	opts := testOpts()
	opts.Wait = true
	objs := manyCMs(h.ns, "1", 20)
	h.apply(opts, objs...)
	res := h.settle(opts, 0, objs)
	if s := res.Summary(); s.Unchanged != 20 || s.NotReady != 0 {
		t.Errorf("no-op summary = %+v, want 20 unchanged, all ready", s)
	}
	if res.Inventory.Len() != 20 {
		t.Errorf("the no-op's inventory has %d entries, want 20", res.Inventory.Len())
	}

	// A change of the set reads the inventory again and records it.
	changed := manyCMs(h.ns, "1", 21)
	changed[3] = configMap(h.ns, "cm-03", map[string]any{"v": "2"})
	res = h.apply(opts, changed...)
	if got := actions(res.Changes); got[cmID(h.ns, "cm-03")] != ActionConfigured || got[cmID(h.ns, "cm-20")] != ActionCreated {
		t.Errorf("actions after the change: %v", got)
	}
	if inv := h.inventory(); len(inv) != 21 {
		t.Errorf("stored inventory has %d entries after the change, want 21", len(inv))
	}
}

// TestHeadsWatchMissesInventoryEdit: an edit of the inventory ConfigMap (an entry removed
// by hand) changes its version, so the next run reads it again and writes the entry back
// ahead (I2), instead of trusting what it remembered.
func TestHeadsWatchMissesInventoryEdit(t *testing.T) {
	h := newHarness(t, Hooks{})
	h.useWatchEngine(Options{Heads: runHeads(t)})
	opts := testOpts()
	objs := manyCMs(h.ns, "1", 5)
	h.apply(opts, objs...)
	h.settle(opts, 0, objs)

	cm := &corev1.ConfigMap{}
	if err := h.plain.Get(h.ctx, client.ObjectKey{Namespace: h.ns, Name: h.ref.Name}, cm); err != nil {
		t.Fatal(err)
	}
	delete(cm.Data, h.ns+"_cm-02__ConfigMap")
	if len(cm.Data) != 4 {
		t.Fatalf("the inventory entry of cm-02 was not found in %v", cm.Data)
	}
	if err := h.plain.Update(h.ctx, cm); err != nil {
		t.Fatal(err)
	}
	key := cmID(h.ns, "cm-02")
	for range 50 { // until the watch shows the edit, runs may still start from the old read
		h.apply(opts, objs...)
		if _, ok := h.inventory()[key]; ok {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the entry of %s removed by hand was never written back: %v", key, h.inventory())
}

// frozenHeads is a watch of the inventory heads that answers from the API server until
// frozen, then keeps its last answers: a watch that fell behind.
type frozenHeads struct {
	store  *inventory.Store
	ctx    context.Context
	mu     sync.Mutex
	frozen bool
	last   map[string]string
}

func (f *frozenHeads) Version(ns, name string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := ns + "/" + name
	if !f.frozen {
		v, err := f.store.Version(f.ctx, inventory.Ref{Namespace: ns, Name: name, ID: "any"})
		if err != nil || v == "" {
			return "", false
		}
		f.last[key] = v
	}
	v, ok := f.last[key]
	return v, ok
}

func (f *frozenHeads) freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.frozen = true
}

// TestHeadsStaleWatchWritesNothingFromMemory: the watch of the heads is stuck at the version
// this engine read, while another writer (a replica that held the Sync meanwhile) pruned an
// object and recorded the inventory without it. The next run starts from the remembered
// inventory, which still lists the object; it must not create the object again on that
// word: before its first write it asks the API server, finds the inventory changed, and
// starts over from a read, so the object is written ahead into the inventory before it is
// created (I2: checked at the create, by the AfterApply hook).
func TestHeadsStaleWatchWritesNothingFromMemory(t *testing.T) {
	h := newHarness(t, Hooks{})
	heads := &frozenHeads{store: inventory.NewStore(h.plain), ctx: h.ctx, last: map[string]string{}}
	var inventoried []string // objects the stored inventory lacked when they were applied
	var mu sync.Mutex
	hooks := Hooks{AfterApply: func(_ int, id string) error {
		inv, err := inventory.NewStore(h.plain).Get(h.ctx, h.ref)
		if err != nil {
			return err
		}
		for _, en := range inv.Entries() {
			if en.Object.String() == id {
				return nil
			}
		}
		mu.Lock()
		inventoried = append(inventoried, id)
		mu.Unlock()
		return nil
	}}
	h.useWatchEngine(Options{Heads: heads, Hooks: hooks})
	opts := testOpts()
	objs := manyCMs(h.ns, "1", 3)
	h.apply(opts, objs...)
	h.settle(opts, 0, objs)
	heads.freeze()

	// Another writer prunes cm-01 (its set left it) and records that.
	other, err := New(env.Config, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Apply(h.ctx, h.set(objs[0], objs[2]), opts); err != nil {
		t.Fatal(err)
	}
	if h.liveCM("cm-01") != nil {
		t.Fatal("the other writer did not prune cm-01")
	}
	// The object watch has seen the delete (else the run would find cm-01 unchanged).
	gvk := objs[1].GroupVersionKind()
	err = wait.PollUntilContextTimeout(h.ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		cached, err := h.eng.cache.cachedLive(ctx, gvk, client.ObjectKey{Namespace: h.ns, Name: "cm-01"})
		return err == nil && cached == nil, nil
	})
	if err != nil {
		t.Fatal("the engine's watch never saw cm-01 deleted")
	}

	h.rt.Reset()
	res := h.apply(opts, objs...)
	if got := actions(res.Changes)[cmID(h.ns, "cm-01")]; got != ActionCreated {
		t.Errorf("cm-01: %s, want created", got)
	}
	if len(inventoried) > 0 {
		t.Errorf("applied while the stored inventory did not list them (I2): %v", inventoried)
	}
	if _, ok := h.inventory()[cmID(h.ns, "cm-01")]; !ok {
		t.Errorf("cm-01 is not in the stored inventory after the run: %v", h.inventory())
	}
}

// TestHeadsGateFailsClosed: when the API server cannot confirm the inventory's version (the
// read fails), a run that started from a remembered inventory writes nothing and fails.
func TestHeadsGateFailsClosed(t *testing.T) {
	h := newHarness(t, Hooks{})
	h.useWatchEngine(Options{Heads: runHeads(t)})
	opts := testOpts()
	objs := manyCMs(h.ns, "1", 3)
	h.apply(opts, objs...)
	h.settle(opts, 0, objs)

	changed := manyCMs(h.ns, "1", 3)
	changed[1] = configMap(h.ns, "cm-01", map[string]any{"v": "2"})
	h.rt.Reset()
	h.rt.SetRules(fault.Rule{Verb: "get", Resource: "configmaps", Name: h.ref.Name, Status: 500})
	_, err := h.eng.Apply(h.ctx, h.set(changed...), opts)
	// The run started from the remembered inventory: the read that failed is the gate's.
	if err == nil || errors.Is(err, errHeadMoved) || !strings.Contains(err.Error(), "before a write") {
		t.Fatalf("Apply with the version read failing: %v, want the gate's read error", err)
	}
	if w := h.rt.Writes(); len(w) != 0 {
		t.Errorf("writes sent without a confirmed inventory: %v", w)
	}
}

// TestHeadsMissingPartStillStops: an inventory with parts is read at every run, so a part
// deleted by hand (or edited: its version is not the head's) is found by the next run, which
// fails naming it and writes nothing, even when the set did not change. Without it: the run started from the remembered inventory, sent nothing and
// succeeded while the part was missing.
func TestHeadsMissingPartStillStops(t *testing.T) {
	h := newHarness(t, Hooks{})
	h.useWatchEngine(Options{Heads: runHeads(t)})
	h.useParts(inventory.StoreHooks{})
	opts := testOpts()
	all := h.objs(0, 130, "1")
	h.apply(opts, all...)
	h.apply(opts, all...)
	lost := h.stored().listed[0]
	if err := h.plain.Delete(h.ctx, lost); err != nil {
		t.Fatal(err)
	}
	h.rt.Reset()
	_, err := h.eng.Apply(h.ctx, h.set(all...), opts)
	var missing *inventory.MissingPartError
	if !errors.As(err, &missing) || missing.Part != lost.Name {
		t.Fatalf("a no-op run with a missing part: %v, want a MissingPartError naming %s", err, lost.Name)
	}
	if w := h.rt.Writes(); len(w) != 0 {
		t.Errorf("a run with a missing part wrote: %v", w)
	}
}
