package engine

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/cli-utils/pkg/object"

	"github.com/converge-dev/converge/inventory"
)

// gadgetCRD returns a namespaced CRD for kind Gadget in group, with a status subresource
// and no kstatus conditions: kstatus alone calls a Gadget Current as soon as it exists.
func gadgetCRD(group string) *unstructured.Unstructured {
	free := map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}
	return obj("apiextensions.k8s.io/v1", "CustomResourceDefinition", "", "gadgets."+group, map[string]any{
		"spec": map[string]any{
			"group": group,
			"scope": "Namespaced",
			"names": map[string]any{"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
			"versions": []any{map[string]any{
				"name": "v1", "served": true, "storage": true,
				"subresources": map[string]any{"status": map[string]any{}},
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type":       "object",
					"properties": map[string]any{"spec": free, "status": free},
				}},
			}},
		},
	})
}

func gadget(group, ns, name string) *unstructured.Unstructured {
	return obj(group+"/v1", "Gadget", ns, name, map[string]any{"spec": map[string]any{"size": int64(1)}})
}

// gadgetExpr judges Gadgets by status.phase, as a Flux user would write it.
func gadgetExpr(group string) HealthExpr {
	return HealthExpr{APIVersion: group + "/v1", Kind: "Gadget",
		InProgress: "status.phase == 'Pending'",
		Failed:     "status.phase == 'Broken'",
		Current:    "status.phase == 'Ready'",
	}
}

// healthGroup installs the Gadget CRD in a group of the test's own and returns the group.
func healthGroup(h *harness) string {
	h.t.Helper()
	group := strings.ReplaceAll(h.ns, "-", "") + ".health.test"
	t := h.t
	t.Cleanup(func() { _ = h.plain.Delete(context.Background(), gadgetCRD(group)) })
	crdSet := Set{Inventory: inventoryFor(h, "crd"), Objects: []*unstructured.Unstructured{gadgetCRD(group)}}
	if _, err := h.eng.Apply(h.ctx, crdSet, testOpts()); err != nil {
		t.Fatalf("apply CRD: %v", err)
	}
	if err := h.eng.waitEstablished(h.ctx, []string{"gadgets." + group}, nil, time.Minute); err != nil {
		t.Fatal(err)
	}
	// Established comes before discovery serves the kind: wait until the engine's mapper,
	// which re-discovers on a miss, knows it, or the next Apply may call it unknown.
	err := wait.PollUntilContextTimeout(h.ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, err := h.eng.mapper.RESTMapping(schema.GroupKind{Group: group, Kind: "Gadget"}, "v1")
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("Gadget of %s never served by discovery: %v", group, err)
	}
	return group
}

// inventoryFor is a second inventory of the test's namespace.
func inventoryFor(h *harness, suffix string) inventory.Ref {
	ref := h.ref
	ref.Name, ref.ID = ref.Name+"-"+suffix, ref.ID+"-"+suffix
	return ref
}

// setPhase writes status.phase of a live Gadget through the status subresource.
func (h *harness) setPhase(group, name, phase string) {
	h.t.Helper()
	u := h.live(group+"/v1", "Gadget", h.ns, name)
	if u == nil {
		h.t.Fatalf("Gadget %s not found", name)
	}
	if err := unstructured.SetNestedField(u.Object, phase, "status", "phase"); err != nil {
		h.t.Fatal(err)
	}
	if err := h.plain.Status().Update(h.ctx, u); err != nil {
		h.t.Fatalf("status of Gadget %s: %v", name, err)
	}
}

func healthOf(res *Result, id string) ObjectHealth {
	for _, oh := range res.Health {
		if oh.ID == id {
			return oh
		}
	}
	return ObjectHealth{}
}

// TestHealthExprJudgesCustomResource checks that a custom resource without kstatus
// conditions is Ready only when its current expression says so: not while it has no status
// (an evaluation error: Unknown), not while inProgress holds, and Current once current holds.
// Without it (no HealthExprs): kstatus called the Gadget Current at once.
func TestHealthExprJudgesCustomResource(t *testing.T) {
	h := newHarness(t, Hooks{})
	group := healthGroup(h)
	id := h.ns + "_g1_" + group + "_Gadget"
	opts := testOpts()
	opts.Wait, opts.Timeout = true, 3*time.Second
	opts.HealthExprs = []HealthExpr{gadgetExpr(group)}

	for _, phase := range []string{"", "Pending"} {
		if phase != "" {
			h.setPhase(group, "g1", phase)
		}
		res, err := h.eng.Apply(h.ctx, h.set(gadget(group, h.ns, "g1")), opts)
		if err == nil || !strings.Contains(err.Error(), "Gadget "+h.ns+"/g1") {
			t.Fatalf("phase %q: Apply error = %v, want a wait error naming the Gadget", phase, err)
		}
		if got := healthOf(res, id); got.Status == "Current" || got.Status == "" {
			t.Fatalf("phase %q: health %+v, want not Current", phase, got)
		}
	}

	h.setPhase(group, "g1", "Ready")
	res := h.apply(opts, gadget(group, h.ns, "g1"))
	if got := healthOf(res, id); got.Status != "Current" || !strings.Contains(got.Message, "current is true") {
		t.Fatalf("health %+v, want Current by the current expression", got)
	}
}

// TestHealthExprFailed checks that a failed expression ends the wait Failed with its
// message, and that the failure prunes nothing and keeps the objects in the inventory (I8).
// Without it: the Gadget was Current.
func TestHealthExprFailed(t *testing.T) {
	h := newHarness(t, Hooks{})
	group := healthGroup(h)
	opts := testOpts()
	h.apply(opts, gadget(group, h.ns, "g1"), configMap(h.ns, "keep", nil))
	h.setPhase(group, "g1", "Broken")

	opts.Wait, opts.Timeout = true, time.Minute
	opts.HealthExprs = []HealthExpr{gadgetExpr(group)}
	res, err := h.eng.Apply(h.ctx, h.set(gadget(group, h.ns, "g1"), configMap(h.ns, "keep", nil)), opts)
	if err == nil || !strings.Contains(err.Error(), "status Failed") || !strings.Contains(err.Error(), "healthCheckExprs[0].failed is true") {
		t.Fatalf("Apply error = %v, want the Gadget Failed by healthCheckExprs[0].failed", err)
	}
	if strings.Contains(err.Error(), "timeout") {
		t.Errorf("the wait ran to its timeout instead of ending on Failed: %v", err)
	}
	if got := healthOf(res, h.ns+"_g1_"+group+"_Gadget"); got.Status != "Failed" {
		t.Errorf("health %+v, want Failed", got)
	}
	if len(res.Pruned) != 0 || h.liveCM("keep") == nil || h.live(group+"/v1", "Gadget", h.ns, "g1") == nil {
		t.Fatalf("a failed health check removed something: pruned %v", res.Pruned)
	}
	wantKeys(t, "inventory", h.inventory(), cmID(h.ns, "keep"), h.ns+"_g1_"+group+"_Gadget")
}

// TestHealthExprRejected checks that an expression that does not compile fails the Apply
// before anything is written, naming the entry, its kind, the field and CEL's position: the
// new object is not created and the one that left the set is not pruned (I8).
func TestHealthExprRejected(t *testing.T) {
	h := newHarness(t, Hooks{})
	opts := testOpts()
	h.apply(opts, configMap(h.ns, "old", nil))

	opts.HealthExprs = []HealthExpr{
		{APIVersion: "example.com/v1", Kind: "Widget", Current: "status.ready == true"},
		{APIVersion: "example.com/v1", Kind: "Gizmo", Current: "status.ready", Failed: "status.x == foo.bar"},
		{APIVersion: "example.com/v1", Kind: "Doohickey", Current: "size(status.items)"},
		{APIVersion: "example.com/v2", Kind: "Widget", Current: "true"},
		{APIVersion: "example.com/v1", Kind: "Thingamajig", Failed: "true"},
	}
	_, err := h.eng.Apply(h.ctx, h.set(configMap(h.ns, "new", nil)), opts)
	if err == nil || !IsTerminal(err) {
		t.Fatalf("Apply error = %v, want a terminal error", err)
	}
	for _, want := range []string{
		"healthCheckExprs[1] (example.com/v1 Gizmo).failed: ERROR: <input>:1:13: undeclared reference to 'foo'",
		"healthCheckExprs[2] (example.com/v1 Doohickey).current: returns int, not bool",
		"healthCheckExprs[3] (example.com/v2 Widget): Widget.example.com is already judged by healthCheckExprs[0]",
		"healthCheckExprs[4] (example.com/v1 Thingamajig).current: required",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Apply error = %v\nwant it to contain %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "healthCheckExprs[0] (") {
		t.Errorf("the valid entry is named: %v", err)
	}
	if strings.Contains(err.Error(), "\n | ") {
		t.Errorf("CEL's source quote is in the message (one line per error): %v", err)
	}
	if h.liveCM("new") != nil || h.liveCM("old") == nil {
		t.Fatal("a rejected expression applied or pruned something")
	}
	wantKeys(t, "inventory", h.inventory(), cmID(h.ns, "old"))
}

// TestHealthChecksExtraObject checks that spec.healthChecks objects of a kind the set does
// not hold are waited for, also without Wait: missing, the wait times out naming it; once it
// exists and its expression says current, the run is Ready. It is never applied, recorded or
// pruned. Without it: the set's ConfigMap alone was waited for (nothing without Wait).
func TestHealthChecksExtraObject(t *testing.T) {
	h := newHarness(t, Hooks{})
	group := healthGroup(h)
	gk := schema.GroupKind{Group: group, Kind: "Gadget"}
	opts := testOpts()
	opts.Wait, opts.Timeout = true, 3*time.Second
	opts.DefaultNamespace = h.ns
	opts.HealthChecks = []object.ObjMetadata{{GroupKind: gk, Name: "ext"}} // namespace from DefaultNamespace
	opts.HealthExprs = []HealthExpr{gadgetExpr(group)}
	id := h.ns + "_ext_" + group + "_Gadget"

	// Without Wait, the health checks alone are waited for (as Flux does).
	noWait := opts
	noWait.Wait = false
	res, err := h.eng.Apply(h.ctx, h.set(configMap(h.ns, "cm", nil)), noWait)
	if err == nil || !strings.Contains(err.Error(), "Gadget "+h.ns+"/ext") {
		t.Fatalf("Apply error = %v, want a wait error naming the missing Gadget", err)
	}
	if got := healthOf(res, id); got.Status != "NotFound" || len(res.Health) != 1 {
		t.Errorf("health %+v, want the Gadget alone, NotFound", res.Health)
	}

	if err := h.plain.Create(h.ctx, gadget(group, h.ns, "ext")); err != nil {
		t.Fatal(err)
	}
	h.setPhase(group, "ext", "Ready")
	res = h.apply(opts, configMap(h.ns, "cm", nil))
	if got := healthOf(res, id); got.Status != "Current" {
		t.Fatalf("health %+v, want Current", got)
	}
	for _, c := range res.Changes {
		if c.Object.GroupKind == gk {
			t.Errorf("the health check object was applied: %+v", c)
		}
	}
	wantKeys(t, "inventory", h.inventory(), cmID(h.ns, "cm"))

	// Dropped from the set's health checks, it stays: it was never ours.
	opts.HealthChecks = nil
	h.apply(opts, configMap(h.ns, "cm", nil))
	if h.live(group+"/v1", "Gadget", h.ns, "ext") == nil {
		t.Fatal("the health check object was deleted")
	}
}

// TestHealthExprWatchReadsWholeObject checks watch mode: a kind kstatus judges from its
// metadata alone (a ClusterIP Service, read from the watch cache as metadata only) is read
// whole once an expression judges it, so the expression sees its spec. Without
// the exclusion in wait the expression finds no spec: Unknown until the timeout.
func TestHealthExprWatchReadsWholeObject(t *testing.T) {
	h := newWatchHarness(t)
	svc := obj("v1", "Service", h.ns, "web", map[string]any{"spec": map[string]any{
		"ports": []any{map[string]any{"port": int64(80)}},
	}})
	opts := testOpts()
	opts.Wait, opts.Timeout = true, 5*time.Second
	opts.HealthExprs = []HealthExpr{{APIVersion: "v1", Kind: "Service", Current: "spec.type == 'ClusterIP'"}}
	res := h.apply(opts, svc)
	if got := healthOf(res, h.ns+"_web__Service"); got.Status != "Current" || !strings.Contains(got.Message, "current is true") {
		t.Fatalf("health %+v, want Current by the expression", got)
	}
}

// TestHealthRulesCompute holds the evaluation to Flux's rules, behind the engine's
// generation rule: a copy older than the applied generation is InProgress, a
// status.observedGeneration behind metadata.generation is InProgress, then inProgress,
// failed and current are tried in that order; none true is InProgress; a non-bool result or
// a missing field is an error (Unknown).
func TestHealthRulesCompute(t *testing.T) {
	rules, err := CompileHealthExprs([]HealthExpr{{APIVersion: "example.com/v1", Kind: "Widget",
		InProgress: "status.phase == 'Pending' || status.phase == 'Both'",
		Failed:     "status.phase == 'Broken' || status.phase == 'Both'",
		Current:    "status.phase == 'Ready' ? true : status.phase",
	}})
	if err != nil {
		t.Fatal(err)
	}
	w := func(gen int64, st map[string]any) *unstructured.Unstructured {
		u := obj("example.com/v1", "Widget", "ns", "w", nil)
		u.SetGeneration(gen)
		if st != nil {
			u.Object["status"] = st
		}
		return u
	}
	id := object.ObjMetadata{Namespace: "ns", Name: "w", GroupKind: schema.GroupKind{Group: "example.com", Kind: "Widget"}}
	compute := atGeneration(map[object.ObjMetadata]int64{id: 2}, rules)
	for _, tc := range []struct {
		name string
		u    *unstructured.Unstructured
		want string // status, or "error"
	}{
		{"older than applied", w(1, map[string]any{"phase": "Ready"}), "InProgress"},
		{"observedGeneration behind", w(3, map[string]any{"phase": "Ready", "observedGeneration": int64(2)}), "InProgress"},
		{"current", w(2, map[string]any{"phase": "Ready", "observedGeneration": int64(2)}), "Current"},
		{"failed", w(2, map[string]any{"phase": "Broken"}), "Failed"},
		{"inProgress before failed", w(2, map[string]any{"phase": "Both"}), "InProgress"},
		{"none true", w(2, map[string]any{"phase": "Pending"}), "InProgress"},
		{"not a bool", w(2, map[string]any{"phase": "Other"}), "error"},
		{"no status", w(2, nil), "error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := compute(tc.u)
			got := "error"
			if err == nil {
				got = res.Status.String()
			}
			if got != tc.want {
				t.Fatalf("status %s (err %v), want %s", got, err, tc.want)
			}
			if err != nil && !strings.Contains(err.Error(), "Widget ns/w: healthCheckExprs[0].") {
				t.Errorf("error %v names neither the object nor the expression", err)
			}
		})
	}
	// Other kinds stay with kstatus.
	if res, err := compute(obj("v1", "ConfigMap", "ns", "c", nil)); err != nil || res.Status.String() != "Current" {
		t.Fatalf("ConfigMap: %v %v, want kstatus' Current", res, err)
	}
}

// TestAddHealthChecks checks how health check IDs are completed: the default namespace for a
// namespaced kind without one, none for a cluster-scoped kind, no duplicate of an applied
// object, and metadata-only reads for kinds judged by existence (a Secret's data is never
// cached for a health check).
func TestAddHealthChecks(t *testing.T) {
	h := newHarness(t, Hooks{})
	gk := func(group, kind string) schema.GroupKind { return schema.GroupKind{Group: group, Kind: kind} }
	applied := object.ObjMetadata{GroupKind: gk("", "ConfigMap"), Namespace: h.ns, Name: "cm"}
	w := waitSet{ids: []object.ObjMetadata{applied}, byMeta: map[object.ObjMetadata]bool{applied: true}}
	h.eng.addHealthChecks(&w, []object.ObjMetadata{
		{GroupKind: gk("", "Secret"), Name: "s"},
		{GroupKind: gk("rbac.authorization.k8s.io", "ClusterRole"), Namespace: "elsewhere", Name: "r"},
		{GroupKind: gk("apps", "Deployment"), Namespace: "other", Name: "d"},
		{GroupKind: gk("", "ConfigMap"), Name: "cm"},
	}, h.ns)
	want := []object.ObjMetadata{
		applied,
		{GroupKind: gk("", "Secret"), Namespace: h.ns, Name: "s"},
		{GroupKind: gk("rbac.authorization.k8s.io", "ClusterRole"), Name: "r"},
		{GroupKind: gk("apps", "Deployment"), Namespace: "other", Name: "d"},
	}
	if fmt.Sprint(w.ids) != fmt.Sprint(want) {
		t.Fatalf("ids %v, want %v", w.ids, want)
	}
	if !w.byMeta[want[1]] || !w.byMeta[want[2]] || w.byMeta[want[3]] {
		t.Fatalf("byMeta %v: want the Secret and the ClusterRole only (and the applied ConfigMap)", w.byMeta)
	}
}
