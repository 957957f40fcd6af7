package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// waveOf annotates u with Argo CD's sync-wave.
func waveOf(u *unstructured.Unstructured, wave string) *unstructured.Unstructured {
	return annotate(u, ArgoSyncWaveAnnotation, wave)
}

// changeOf is the change of id in res.
func changeOf(res *Result, id string) Change {
	for _, c := range res.Changes {
		if c.ID == id {
			return c
		}
	}
	return Change{}
}

// setPhaseIn is setPhase for a Gadget of namespace ns.
func (h *harness) setPhaseIn(group, ns, name, phase string) {
	h.t.Helper()
	u := h.live(group+"/v1", "Gadget", ns, name)
	if u == nil {
		h.t.Fatalf("Gadget %s/%s not found", ns, name)
	}
	if err := unstructured.SetNestedField(u.Object, phase, "status", "phase"); err != nil {
		h.t.Fatal(err)
	}
	if err := h.plain.Status().Update(h.ctx, u); err != nil {
		h.t.Fatalf("status of Gadget %s/%s: %v", ns, name, err)
	}
}

// TestWaveWaitsForTheLowerWave checks the daemon's way (CheckOnce): a ConfigMap of wave 1 is
// not applied while the Gadget of wave 0 (-1 here, as Argo CD allows) is not Ready; the run
// says so (Result.Held names both and the wave, Health the Gadget), the ConfigMap is
// reported skipped and stays in the inventory, and nothing is pruned. Once the Gadget's
// status says Ready, the next run applies the ConfigMap and then prunes. A dry-run shows
// each object's wave. Without it: the ConfigMap was created in the first run, with the Gadget
// not Ready, and the old object pruned.
func TestWaveWaitsForTheLowerWave(t *testing.T) {
	h := newHarness(t, Hooks{})
	group := healthGroup(h)
	opts := testOpts()
	opts.CheckOnce = true
	opts.HealthExprs = []HealthExpr{gadgetExpr(group)}
	h.apply(opts, configMap(h.ns, "old", nil))

	set := func() []*unstructured.Unstructured {
		return []*unstructured.Unstructured{
			waveOf(gadget(group, h.ns, "g1"), "-1"),
			waveOf(configMap(h.ns, "late", nil), "1"),
		}
	}
	dry := opts
	dry.DryRun = true
	res, err := h.eng.Apply(h.ctx, h.set(set()...), dry)
	if err != nil {
		t.Fatalf("dry-run: %v", err)
	}
	if w := changeOf(res, cmID(h.ns, "late")).Wave; w != "1" {
		t.Errorf("dry-run: wave of the ConfigMap %q, want 1", w)
	}
	if w := changeOf(res, h.ns+"_g1_"+group+"_Gadget").Wave; w != "-1" {
		t.Errorf("dry-run: wave of the Gadget %q, want -1", w)
	}

	res, err = h.eng.Apply(h.ctx, h.set(set()...), opts)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if h.liveCM("late") != nil {
		t.Fatal("the ConfigMap of wave 1 was applied while the Gadget of wave -1 was not Ready")
	}
	for _, want := range []string{"ConfigMap " + h.ns + "/late (wave 1) not applied", "waiting for Gadget " + h.ns + "/g1 (wave -1)"} {
		if !strings.Contains(res.Held, want) {
			t.Errorf("Held %q, want it to contain %q", res.Held, want)
		}
	}
	if got := healthOf(res, h.ns+"_g1_"+group+"_Gadget"); got.Status == "Current" || got.Status == "" {
		t.Errorf("health of the Gadget %+v, want not Current", got)
	}
	if c := changeOf(res, cmID(h.ns, "late")); c.Action != ActionSkipped || !strings.Contains(c.Message, "not applied") {
		t.Errorf("change of the ConfigMap %+v, want skipped, not applied", c)
	}
	if len(res.Pruned) != 0 || h.liveCM("old") == nil {
		t.Fatalf("a held run pruned: %v", res.Pruned)
	}
	wantKeys(t, "inventory", h.inventory(), cmID(h.ns, "old"), cmID(h.ns, "late"), h.ns+"_g1_"+group+"_Gadget")

	h.setPhase(group, "g1", "Ready")
	res = h.apply(opts, set()...)
	if res.Held != "" || h.liveCM("late") == nil {
		t.Fatalf("after the Gadget is Ready: Held %q, ConfigMap applied %v", res.Held, h.liveCM("late") != nil)
	}
	if h.liveCM("old") != nil {
		t.Error("the object that left the set was not pruned once every wave was applied")
	}
	wantKeys(t, "inventory", h.inventory(), cmID(h.ns, "late"), h.ns+"_g1_"+group+"_Gadget")
}

// TestWaveNeverReady checks a blocking run (the CLI's): a wave that does not become Ready
// within the timeout fails the run with an error naming the wave, the object waited for and
// what was not applied, before the run's own bound; the later wave is not applied and
// nothing is pruned. Without it: no error (Wait off), the later wave applied, the old object
// pruned.
func TestWaveNeverReady(t *testing.T) {
	h := newHarness(t, Hooks{})
	group := healthGroup(h)
	opts := testOpts()
	opts.HealthExprs = []HealthExpr{gadgetExpr(group)}
	h.apply(opts, configMap(h.ns, "old", nil))

	opts.Timeout = 2 * time.Second
	done := make(chan struct{})
	var res *Result
	var err error
	go func() {
		defer close(done)
		res, err = h.eng.Apply(h.ctx, h.set(gadget(group, h.ns, "g1"), waveOf(configMap(h.ns, "late", nil), "1")), opts)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("Apply did not return within a minute of its 2 s timeout")
	}
	if err == nil {
		t.Fatal("Apply: no error, want the wave's timeout")
	}
	for _, want := range []string{"Gadget " + h.ns + "/g1 (wave 0)", "ConfigMap " + h.ns + "/late (wave 1) not applied", "timeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %v\nwant it to contain %q", err, want)
		}
	}
	if h.liveCM("late") != nil || h.liveCM("old") == nil || len(res.Pruned) != 0 {
		t.Fatalf("late applied %v, old pruned %v (%v)", h.liveCM("late") != nil, h.liveCM("old") == nil, res.Pruned)
	}
}

// TestDependsOnAcrossKindsAndNamespaces checks config.kubernetes.io/depends-on between a
// ConfigMap of one namespace and a Gadget of another, all of wave 0: the ConfigMap waits for
// the Gadget to be Ready; a dependency outside the set that exists in the cluster (a Secret
// created by the test) is waited for and never applied. Without it: the ConfigMap was applied at
// once.
func TestDependsOnAcrossKindsAndNamespaces(t *testing.T) {
	h := newHarness(t, Hooks{})
	group := healthGroup(h)
	other := env.Namespace(t)
	if err := h.plain.Create(h.ctx, obj("v1", "Secret", other, "outside", nil)); err != nil {
		t.Fatal(err)
	}
	opts := testOpts()
	opts.CheckOnce = true
	opts.HealthExprs = []HealthExpr{gadgetExpr(group)}
	set := func() []*unstructured.Unstructured {
		return []*unstructured.Unstructured{
			gadget(group, other, "g1"),
			annotate(configMap(h.ns, "user", nil), DependsOnAnnotation,
				group+"/namespaces/"+other+"/Gadget/g1, /namespaces/"+other+"/Secret/outside"),
		}
	}
	res := h.apply(opts, set()...)
	if h.liveCM("user") != nil {
		t.Fatal("the ConfigMap was applied before the Gadget it depends on was Ready")
	}
	if !strings.Contains(res.Held, "waiting for Gadget "+other+"/g1") {
		t.Errorf("Held %q, want it to name the Gadget", res.Held)
	}
	if w := changeOf(res, cmID(h.ns, "user")).Wave; w != "0, step 2" {
		t.Errorf("wave of the ConfigMap %q, want 0, step 2", w)
	}
	h.setPhaseIn(group, other, "g1", "Ready")
	res = h.apply(opts, set()...)
	if res.Held != "" || h.liveCM("user") == nil {
		t.Fatalf("after the Gadget is Ready: Held %q, ConfigMap applied %v", res.Held, h.liveCM("user") != nil)
	}
	for _, c := range res.Changes {
		if c.Object.Name == "outside" {
			t.Errorf("the dependency outside the set was applied: %+v", c)
		}
	}
	wantKeys(t, "inventory", h.inventory(), cmID(h.ns, "user"), other+"_g1_"+group+"_Gadget")
}

// TestPruneInReverseOrder checks that objects leaving the set are deleted in the reverse of
// their apply order: the higher wave first, and a dependent before what it depends on, as
// their live annotations say. Without it: by name (one at a time): a-early, b-base, c-user,
// z-late.
func TestPruneInReverseOrder(t *testing.T) {
	var mu sync.Mutex
	var order []string
	h := newHarness(t, Hooks{AfterPrune: func(_ int, id string) error {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, strings.Split(id, "_")[1])
		return nil
	}})
	opts := testOpts()
	opts.Concurrency = 1
	h.apply(opts,
		waveOf(configMap(h.ns, "a-early", nil), "0"),
		waveOf(configMap(h.ns, "z-late", nil), "1"),
		configMap(h.ns, "b-base", nil),
		annotate(configMap(h.ns, "c-user", nil), DependsOnAnnotation, "/namespaces/"+h.ns+"/ConfigMap/b-base"),
		configMap(h.ns, "keep", nil))
	h.apply(opts, configMap(h.ns, "keep", nil))
	want := "z-late c-user a-early b-base"
	if got := strings.Join(order, " "); got != want {
		t.Fatalf("prune order %q, want %q", got, want)
	}
}

// TestDependsOnCycle checks that a depends-on cycle is a terminal error naming the objects
// in it, with nothing applied and nothing pruned. Without it: both applied, the old one pruned.
func TestDependsOnCycle(t *testing.T) {
	h := newHarness(t, Hooks{})
	opts := testOpts()
	h.apply(opts, configMap(h.ns, "old", nil))
	dep := func(name string) string { return "/namespaces/" + h.ns + "/ConfigMap/" + name }
	_, err := h.eng.Apply(h.ctx, h.set(
		annotate(configMap(h.ns, "a", nil), DependsOnAnnotation, dep("b")),
		annotate(configMap(h.ns, "b", nil), DependsOnAnnotation, dep("a")),
		configMap(h.ns, "free", nil)), opts)
	if err == nil || !IsTerminal(err) || !errors.Is(err, ErrDependencyCycle) {
		t.Fatalf("Apply error %v, want a terminal depends-on cycle", err)
	}
	want := cmName(h.ns, "a") + " → " + cmName(h.ns, "b") + " → " + cmName(h.ns, "a")
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %v\nwant it to name the cycle %q", err, want)
	}
	if h.liveCM("a") != nil || h.liveCM("b") != nil || h.liveCM("free") != nil || h.liveCM("old") == nil {
		t.Fatal("a set with a cycle applied or pruned something")
	}
	wantKeys(t, "inventory", h.inventory(), cmID(h.ns, "old"))
}

// TestDependsOnMissing checks that a dependency neither in the set nor in the cluster is an
// error naming the object and its dependency, with nothing applied and nothing pruned.
// Without it: applied, the old one pruned.
func TestDependsOnMissing(t *testing.T) {
	h := newHarness(t, Hooks{})
	opts := testOpts()
	h.apply(opts, configMap(h.ns, "old", nil))
	_, err := h.eng.Apply(h.ctx, h.set(
		annotate(configMap(h.ns, "user", nil), DependsOnAnnotation, "/namespaces/"+h.ns+"/Secret/nowhere"),
		configMap(h.ns, "other", nil)), opts)
	want := cmName(h.ns, "user") + " depends on Secret " + h.ns + "/nowhere"
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "neither in the set nor in the cluster") {
		t.Fatalf("Apply error %v, want it to say %q is neither in the set nor in the cluster", err, want)
	}
	if h.liveCM("user") != nil || h.liveCM("other") != nil || h.liveCM("old") == nil {
		t.Fatal("a set with a missing dependency applied or pruned something")
	}
}

// TestDependsOnTooManyExternal: a set whose depends-on annotations name more objects outside
// it than MaxExternalDependencies is refused, terminal, naming the limit, before any of them
// is read; nothing is applied or pruned.
func TestDependsOnTooManyExternal(t *testing.T) {
	h := newHarness(t, Hooks{})
	opts := testOpts()
	h.apply(opts, configMap(h.ns, "old", nil))
	var deps []string
	for i := range MaxExternalDependencies + 1 {
		deps = append(deps, fmt.Sprintf("/namespaces/%s/Secret/s%d", h.ns, i))
	}
	_, err := h.eng.Apply(h.ctx, h.set(annotate(configMap(h.ns, "user", nil), DependsOnAnnotation, strings.Join(deps, ","))), opts)
	if err == nil || !IsTerminal(err) || !strings.Contains(err.Error(), fmt.Sprintf("more than %d objects outside it", MaxExternalDependencies)) {
		t.Fatalf("Apply error %v, want a terminal error naming the limit", err)
	}
	if h.liveCM("user") != nil || h.liveCM("old") == nil {
		t.Fatal("a set over the limit applied or pruned something")
	}
}

// TestSyncWaveInvalid checks that a sync-wave that is not an integer is a terminal error
// naming the object and the annotation, with nothing applied. Without it: applied as wave 0.
func TestSyncWaveInvalid(t *testing.T) {
	h := newHarness(t, Hooks{})
	opts := testOpts()
	_, err := h.eng.Apply(h.ctx, h.set(waveOf(configMap(h.ns, "bad", nil), "first"), configMap(h.ns, "good", nil)), opts)
	want := cmName(h.ns, "bad") + ": annotation " + ArgoSyncWaveAnnotation + `: "first" is not an integer`
	if err == nil || !IsTerminal(err) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Apply error %v, want a terminal error containing %q", err, want)
	}
	if h.liveCM("bad") != nil || h.liveCM("good") != nil {
		t.Fatal("a set with an invalid wave applied something")
	}
}

// TestWatchOrderedNoOpSendsNothing checks that waves, depends-on and ignore rules cost a
// converged set no request: its waits read the watch cache, as the final readiness check does,
// and an ignored field changes nothing the memo remembers (the no-op target of
// docs/benchmarks.md: at most 10 requests, no write; here the inventory's read alone, as for
// an unordered set). 300 objects in three waves, every tenth depending on another, with three
// ignore rules (one path of every object, one of the objects whose name ends in 7, the fields
// of two field managers in the objects whose name ends in 3);
// CONVERGE_ORDERED_NOOP_OBJECTS sets another count (the figure at 10,000 is measured so).
// A guard of the ordered path's budget: the unordered path had no wait to read for.
func TestWatchOrderedNoOpSendsNothing(t *testing.T) {
	n := 300
	if v, err := strconv.Atoi(os.Getenv("CONVERGE_ORDERED_NOOP_OBJECTS")); err == nil && v >= 20 {
		n = v
	}
	h := newWatchHarness(t)
	opts := testOpts()
	opts.Wait, opts.CheckOnce, opts.Concurrency = true, true, 16
	opts.Ignore = []IgnoreRule{
		{Paths: []string{"/data/v"}, Target: &ObjectSelector{Kind: "ConfigMap", Name: ".*7"}},
		{Paths: []string{"/metadata/labels/scaled-by"}},
		{Managers: []string{"kube-controller-manager", "mutating-*"}, Target: &ObjectSelector{Kind: "ConfigMap", Name: ".*3"}},
	}
	objs := manyCMs(h.ns, "1", n)
	for i, u := range objs {
		u.SetLabels(map[string]string{"scaled-by": "source"})
		waveOf(u, []string{"-1", "0", "2"}[i%3])
		if i%10 == 4 && i+3 < n {
			annotate(u, DependsOnAnnotation, "/namespaces/"+h.ns+"/ConfigMap/"+objs[i+3].GetName())
		}
	}
	h.apply(opts, objs...)
	budget := 1 // the inventory's read, as for an unordered set
	if n > 5000 {
		budget = 2 // 10,000 entries of this test's names fill two parts of the inventory (900 KiB each)
	}
	res := h.settle(opts, budget, objs)
	if s := res.Summary(); s.Unchanged != n || res.Held != "" || len(res.IgnoreUnmatched) != 0 {
		t.Fatalf("no-op of an ordered set: %+v, held %q, unmatched ignore rules %q", s, res.Held, res.IgnoreUnmatched)
	}
	if w := h.rt.Writes(); len(w) != 0 {
		t.Errorf("no-op of an ordered set wrote: %v", w)
	}
	start := time.Now()
	h.rt.Reset()
	h.apply(opts, objs...)
	t.Logf("no-op of %d ordered objects with ignore rules: %d requests, %d writes, %s", n, h.rt.Count(), len(h.rt.Writes()), time.Since(start))
}

// TestCRDDependingOnAnObject checks a CRD that depends on an object of a later stage (the
// Deployment of its conversion webhook, here a ConfigMap): the CRD is applied after it, and
// its custom resources after the CRD, all in one run. Without the custom resources following
// their CRD, they were applied first and failed on a kind not served.
func TestCRDDependingOnAnObject(t *testing.T) {
	h := newHarness(t, Hooks{})
	group := strings.ReplaceAll(h.ns, "-", "") + ".waves.test"
	crd := annotate(gadgetCRD(group), DependsOnAnnotation, "/namespaces/"+h.ns+"/ConfigMap/webhook")
	t.Cleanup(func() { _ = h.plain.Delete(context.Background(), gadgetCRD(group)) })
	opts := testOpts()
	opts.Timeout = 20 * time.Second
	res := h.apply(opts, configMap(h.ns, "webhook", nil), crd, gadget(group, h.ns, "g1"))
	var order []string
	for _, c := range res.Changes {
		order = append(order, c.Object.GroupKind.Kind+" "+c.Wave)
	}
	if got := strings.Join(order, ", "); got != "ConfigMap 0, CustomResourceDefinition 0, step 2, Gadget 0, step 3" {
		t.Errorf("apply order %q", got)
	}
	if h.live(group+"/v1", "Gadget", h.ns, "g1") == nil {
		t.Fatal("the custom resource was not applied")
	}
}

// TestDeleteInReverseOrder checks that deleting a whole set goes in reverse apply order too:
// the higher wave first, a dependent before what it depends on. Without it: by name.
func TestDeleteInReverseOrder(t *testing.T) {
	var mu sync.Mutex
	var order []string
	h := newHarness(t, Hooks{AfterPrune: func(_ int, id string) error {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, strings.Split(id, "_")[1])
		return nil
	}})
	h.apply(testOpts(),
		waveOf(configMap(h.ns, "a-early", nil), "0"),
		waveOf(configMap(h.ns, "z-late", nil), "1"),
		configMap(h.ns, "b-base", nil),
		annotate(configMap(h.ns, "c-user", nil), DependsOnAnnotation, "/namespaces/"+h.ns+"/ConfigMap/b-base"))
	if _, err := h.eng.Delete(h.ctx, h.ref, DeleteOptions{Concurrency: 1}); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(order, " "), "z-late c-user a-early b-base"; got != want {
		t.Fatalf("delete order %q, want %q", got, want)
	}
}

// TestPruneOrderReadsAgainWhatChanged checks I1 across pruneOrder's early read: an object
// another inventory takes over while the prune deletes a higher wave is not deleted, although
// the read the order was computed from still showed it ours. Without the resourceVersion
// precondition on a delete decided on that read, it was deleted.
func TestPruneOrderReadsAgainWhatChanged(t *testing.T) {
	var h *harness
	taken := false
	h = newHarness(t, Hooks{AfterPrune: func(_ int, id string) error {
		if taken || !strings.Contains(id, "_z-late_") {
			return nil
		}
		taken = true
		u := h.liveCM("a-early")
		annotate(u, OwnerAnnotation, "someone-else")
		return h.plain.Update(h.ctx, u)
	}})
	opts := testOpts()
	opts.Concurrency = 1
	h.apply(opts, waveOf(configMap(h.ns, "a-early", nil), "0"), waveOf(configMap(h.ns, "z-late", nil), "1"), configMap(h.ns, "keep", nil))
	res := h.apply(opts, configMap(h.ns, "keep", nil))
	if !taken {
		t.Fatal("the hook never ran")
	}
	if h.liveCM("a-early") == nil {
		t.Fatalf("I1: the object taken over by another inventory was deleted: %+v", res.Pruned)
	}
	if h.liveCM("z-late") != nil {
		t.Error("the higher wave was not pruned")
	}
}
