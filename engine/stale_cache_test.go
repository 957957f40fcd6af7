package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/e2e/fault"
	"github.com/converge-dev/converge/inventory"
)

// staleCache serves the engine's watch-cache reads through a fault.StaleReader.
type staleCache struct {
	cache.Cache
	stale *fault.StaleReader
}

func (c staleCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return c.stale.Get(ctx, key, obj, opts...)
}

func (c staleCache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return c.stale.List(ctx, list, opts...)
}

// newStaleHarness is a harness whose engine runs a watch cache (Options.Watch) read through a
// StaleReader, so a test can freeze what the engine's cache shows of a kind.
func newStaleHarness(t *testing.T) (*harness, *fault.StaleReader) {
	t.Helper()
	cluster.Require(t, env)
	h := newHarness(t, Hooks{})
	cfg, rt := fault.Config(env.Config)
	eng, err := New(cfg, Options{Watch: true, PollInterval: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stale := fault.NewStaleReader(eng.cache.cache, eng.client.Scheme())
	eng.cache.cache = staleCache{Cache: eng.cache.cache, stale: stale}
	runUntilCleanup(t, eng)
	h.eng, h.rt = eng, rt
	return h, stale
}

var configMapGVK = corev1.SchemeGroupVersion.WithKind("ConfigMap")

// freezeSettled re-applies objs until the watch cache has caught up (a run with nothing but
// the inventory read), then freezes the cache's view of ConfigMaps in the namespace.
func (h *harness) freezeSettled(stale *fault.StaleReader, objs []*unstructured.Unstructured) {
	h.t.Helper()
	h.settle(testOpts(), 1, objs)
	if err := stale.Freeze(h.ctx, configMapGVK, h.ns); err != nil {
		h.t.Fatal(err)
	}
}

// TestStaleCachePruneDeletesOnlyWhatIsOurs freezes the engine's cache of ConfigMaps and then,
// behind its back, recreates one inventoried object as a foreign look-alike (same name, new
// UID, no owner annotation), hands another to someone else, deletes a third. A prune of all
// three, decided on the frozen view, deletes nothing foreign (I1: UID and resourceVersion
// preconditions, the API server's word before an entry is dropped), and a new object the
// frozen cache has never seen is still tracked and then pruned (I2: a stale "not found" never
// drops a live entry). After Thaw, a run sends no write (I7).
func TestStaleCachePruneDeletesOnlyWhatIsOurs(t *testing.T) {
	h, stale := newStaleHarness(t)
	opts := testOpts()
	all := cms(h.ns, "keep", "recreated", "taken", "gone")
	h.apply(opts, all...)
	h.freezeSettled(stale, all)
	oldUID := h.liveCM("recreated").GetUID()

	if err := h.plain.Delete(h.ctx, h.liveCM("recreated")); err != nil {
		t.Fatal(err)
	}
	lookalike := configMap(h.ns, "recreated", map[string]any{"k": "theirs"})
	if err := h.plain.Create(h.ctx, lookalike); err != nil {
		t.Fatal(err)
	}
	taken := h.liveCM("taken")
	annotate(taken, OwnerAnnotation, "someone-else")
	if err := h.plain.Update(h.ctx, taken); err != nil {
		t.Fatal(err)
	}
	if err := h.plain.Delete(h.ctx, h.liveCM("gone")); err != nil {
		t.Fatal(err)
	}

	served := stale.Served()
	res := h.apply(opts, cms(h.ns, "keep", "fresh")...)
	if stale.Served() == served {
		t.Fatal("the run read nothing from the frozen cache: the scenario did not run")
	}
	if got := h.liveCM("recreated"); got == nil || got.GetUID() == oldUID {
		t.Errorf("I1: the foreign look-alike of recreated was deleted (live %v)", got != nil)
	}
	if h.liveCM("taken") == nil {
		t.Error("I1: taken, now someone else's, was deleted")
	}
	h.ownedSubsetOfInventory()
	wantKeys(t, "inventory", h.inventory(), cmID(h.ns, "keep"), cmID(h.ns, "fresh"))
	if pruned := actions(res.Pruned); pruned[cmID(h.ns, "recreated")] == ActionPruned || pruned[cmID(h.ns, "taken")] == ActionPruned {
		t.Errorf("foreign objects reported pruned: %v", pruned)
	}

	// Still frozen: fresh is missing from the cache, live, ours and inventoried.
	h.apply(opts, cms(h.ns, "keep")...)
	if h.liveCM("fresh") != nil {
		t.Error("fresh, unseen by the frozen cache, was not pruned")
	}
	h.ownedSubsetOfInventory()
	wantKeys(t, "inventory", h.inventory(), cmID(h.ns, "keep"))

	stale.Thaw(configMapGVK.GroupKind())
	h.settle(opts, 1, cms(h.ns, "keep"))
	if w := h.rt.Writes(); len(w) != 0 {
		t.Errorf("I7: a converged run after Thaw sent writes: %v", w)
	}
}

// TestStaleCacheNeverAdopts freezes the engine's cache of ConfigMaps; another set (its own
// inventory, the same field manager, as two Syncs of one daemon have) then creates an object
// this set also declares. Ownership is decided on the API server's word, never on a cached
// "not found": the object keeps its owner, this set reports the overlap and does not
// inventory or prune it (I11, I1).
//
// Without the survey, an apply of an object that the cache does not show and the old
// inventory does not hold, straight away with the shared field manager "converge" (which
// already owns the other set's owner annotation), silently rewrites that annotation, and the
// next run that drops the object deletes the other set's object. The watched view creates at
// once only what the API server listed as missing (the survey).
func TestStaleCacheNeverAdopts(t *testing.T) {
	h, stale := newStaleHarness(t)
	opts := testOpts()
	mine := cms(h.ns, "mine")
	h.apply(opts, mine...)
	h.freezeSettled(stale, mine)

	other := inventory.Ref{Namespace: h.ns, Name: "other-inventory", ID: "other-" + h.ns}
	otherEngine, err := New(env.Config, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := otherEngine.Apply(h.ctx, Set{Inventory: other, Objects: cms(h.ns, "shared")}, opts); err != nil {
		t.Fatalf("the other set's apply: %v", err)
	}

	_, err = h.eng.Apply(h.ctx, h.set(cms(h.ns, "mine", "shared")...), opts)
	if owner := h.liveCM("shared").GetAnnotations()[OwnerAnnotation]; owner != other.ID {
		t.Errorf("I11: shared was adopted on a stale cache: owner annotation %q, want %q (apply error: %v)", owner, other.ID, err)
	}
	if err == nil || !strings.Contains(err.Error(), cmName(h.ns, "shared")) {
		t.Errorf("Apply error = %v, want the overlap on shared reported", err)
	}
	h.apply(opts, mine...) // shared leaves this set: it must not be pruned
	if h.liveCM("shared") == nil {
		t.Error("I1: the other set's object was pruned by this set")
	}
}
