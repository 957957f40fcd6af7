package engine

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

var errCrash = errors.New("crash")

// TestCrashAfterKthApply is S04: the engine crashes after the k-th apply, for every k.
// Invariants: I2 right after the crash (every live object carrying our annotation is in
// the inventory), then I7 (a restarted engine converges, and prunes a newly created object
// the repo dropped meanwhile).
func TestCrashAfterKthApply(t *testing.T) {
	for k := 1; k <= 3; k++ {
		t.Run(fmt.Sprintf("k=%d", k), func(t *testing.T) {
			crash := newHarness(t, Hooks{AfterApply: func(i int, _ string) error {
				if i == k {
					return errCrash
				}
				return nil
			}})
			opts := testOpts()
			opts.Concurrency = 1
			objs := []*unstructured.Unstructured{configMap(crash.ns, "a", nil), configMap(crash.ns, "b", nil),
				configMap(crash.ns, "c", nil), configMap(crash.ns, "d", nil)}
			_, err := crash.eng.Apply(crash.ctx, crash.set(objs...), opts)
			if !errors.Is(err, errCrash) {
				t.Fatalf("Apply error = %v, want the crash", err)
			}
			crash.ownedSubsetOfInventory()

			// Restart with a cold engine; the repo dropped "a", created before the crash.
			h := newHarness(t, Hooks{})
			h.ns, h.ref = crash.ns, crash.ref
			res := h.apply(opts, objs[1:]...)
			if got := actions(res.Pruned)[cmID(h.ns, "a")]; got != ActionPruned {
				t.Errorf("a: prune action %q, want pruned (%v)", got, res.Pruned)
			}
			if h.liveCM("a") != nil {
				t.Error("a survived")
			}
			wantKeys(t, "inventory", h.inventory(), cmID(h.ns, "b"), cmID(h.ns, "c"), cmID(h.ns, "d"))
			for id, uid := range h.inventory() {
				if uid == "" {
					t.Errorf("%s: no UID recorded after the converging run", id)
				}
			}
		})
	}
}

// TestCrashAfterWriteAhead checks I2 at the write-ahead crash point: the inventory already
// holds the desired objects, nothing was applied, and the next run converges.
func TestCrashAfterWriteAhead(t *testing.T) {
	crash := newHarness(t, Hooks{AfterWriteAhead: func() error { return errCrash }})
	opts := testOpts()
	_, err := crash.eng.Apply(crash.ctx, crash.set(configMap(crash.ns, "a", nil)), opts)
	if !errors.Is(err, errCrash) {
		t.Fatalf("Apply error = %v, want the crash", err)
	}
	wantKeys(t, "inventory", crash.inventory(), cmID(crash.ns, "a"))
	if crash.liveCM("a") != nil {
		t.Error("applied despite the crash before apply")
	}
	h := newHarness(t, Hooks{})
	h.ns, h.ref = crash.ns, crash.ref
	opts.AllowEmpty = true // the repo emptied meanwhile: a never existed
	res := h.apply(opts)
	if len(res.Pruned) != 1 || res.Pruned[0].Action != ActionSkipped {
		t.Errorf("pruned = %+v, want a skipped (already gone)", res.Pruned)
	}
	wantKeys(t, "inventory", h.inventory())
}

// TestDeleteInventory is S18: Delete removes exactly the inventory's objects that are still
// ours (I1, I12), survives a crash after the first delete (the inventory still holds the
// rest), and deletes the inventory ConfigMap once empty.
func TestDeleteInventory(t *testing.T) {
	crash := newHarness(t, Hooks{AfterPrune: func(j int, _ string) error {
		if j == 1 {
			return errCrash
		}
		return nil
	}})
	opts := testOpts()
	nsObj := obj("v1", "Namespace", "", crash.ns+"-extra", nil)
	crash.apply(opts, configMap(crash.ns, "a", nil), configMap(crash.ns, "b", nil), nsObj)
	// Someone takes b over: it must survive the delete.
	b := crash.liveCM("b")
	annotate(b, OwnerAnnotation, "someone-else")
	if err := crash.plain.Update(crash.ctx, b); err != nil {
		t.Fatal(err)
	}
	dopts := DeleteOptions{Concurrency: 1}
	if _, err := crash.eng.Delete(crash.ctx, crash.ref, dopts); !errors.Is(err, errCrash) {
		t.Fatalf("Delete error = %v, want the crash", err)
	}
	if n := len(crash.inventory()); n < 2 {
		t.Errorf("after a crash during delete the inventory has %d entries, want >= 2", n)
	}
	h := newHarness(t, Hooks{})
	h.ns, h.ref = crash.ns, crash.ref
	res, err := h.eng.Delete(h.ctx, h.ref, dopts)
	if err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if got := actions(res.Pruned)[cmID(h.ns, "b")]; got != ActionSkipped {
		t.Errorf("b: %s, want skipped", got)
	}
	if h.liveCM("a") != nil || h.liveCM("b") == nil {
		t.Error("wrong objects deleted")
	}
	if ns := h.live("v1", "Namespace", "", nsObj.GetName()); ns != nil && ns.GetDeletionTimestamp() == nil {
		t.Error("the extra Namespace was not deleted")
	}
	if h.live("v1", "ConfigMap", h.ns, h.ref.Name) != nil {
		t.Error("the inventory ConfigMap survived an empty inventory")
	}
}

// TestBadInput checks I8 and the error contract: unknown kinds, namespaced objects without
// a namespace and invalid fields each give an error naming the file it came from and the
// object as "Kind namespace/name" (never the inventory's internal ID), and nothing is pruned
// (the first two apply nothing at all).
func TestBadInput(t *testing.T) {
	tests := []struct {
		name      string
		bad       func(ns string) *unstructured.Unstructured
		wantID    func(ns string) string
		wantMsg   func(ns string) string // the error starts with the origin, then this
		applyNone bool
	}{
		{
			name:   "unknown kind",
			bad:    func(ns string) *unstructured.Unstructured { return obj("nope.example.com/v1", "Widget", ns, "w", nil) },
			wantID: func(ns string) string { return ns + "_w_nope.example.com_Widget" },
			wantMsg: func(ns string) string {
				return "Widget " + ns + "/w: unknown kind Widget of apiVersion nope.example.com/v1: no CRD"
			},
			applyNone: true,
		},
		{
			name:      "namespaced without namespace",
			bad:       func(string) *unstructured.Unstructured { return configMap("", "nons", nil) },
			wantID:    func(string) string { return "_nons__ConfigMap" },
			wantMsg:   func(string) string { return "ConfigMap nons: namespaced kind ConfigMap has no namespace" },
			applyNone: true,
		},
		{
			name: "invalid field",
			bad: func(ns string) *unstructured.Unstructured {
				return obj("v1", "Service", ns, "svc", map[string]any{"spec": map[string]any{
					"ports": []any{map[string]any{"port": int64(70000)}}}})
			},
			wantID:  func(ns string) string { return ns + "_svc__Service" },
			wantMsg: func(ns string) string { return "Service " + ns + "/svc: apply: " },
		},
		{
			name: "annotation not a string",
			bad: func(ns string) *unstructured.Unstructured {
				cm := configMap(ns, "ann", nil)
				cm.Object["metadata"].(map[string]any)["annotations"] = map[string]any{"replicas": int64(1)}
				return cm
			},
			wantID: func(ns string) string { return ns + "_ann__ConfigMap" },
			wantMsg: func(ns string) string {
				return "ConfigMap " + ns + "/ann: metadata.annotations.replicas: 1 is not a string"
			},
			applyNone: true,
		},
		{
			name: "labels not a map",
			bad: func(ns string) *unstructured.Unstructured {
				cm := configMap(ns, "lab", nil)
				cm.Object["metadata"].(map[string]any)["labels"] = []any{"app=x"}
				return cm
			},
			wantID:    func(ns string) string { return ns + "_lab__ConfigMap" },
			wantMsg:   func(ns string) string { return "ConfigMap " + ns + "/lab: metadata.labels: not a map of strings" },
			applyNone: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Hooks{})
			opts := testOpts()
			h.apply(opts, configMap(h.ns, "old", nil))
			set := h.set(configMap(h.ns, "new", nil), tt.bad(h.ns))
			set.Origins = []string{"app/new.yaml:1", "app/bad.yaml:5 (document 2 of 2)"}
			res, err := h.eng.Apply(h.ctx, set, opts)
			want := "app/bad.yaml:5 (document 2 of 2): " + tt.wantMsg(h.ns)
			if err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("Apply error = %v, want one starting with %s", err, want)
			}
			if !IsTerminal(err) {
				t.Errorf("error not terminal: %v", err)
			}
			if len(res.Pruned) != 0 || h.liveCM("old") == nil {
				t.Errorf("I8: bad input pruned: %v", res.Pruned)
			}
			if tt.applyNone && h.liveCM("new") != nil {
				t.Error("bad input applied the valid objects")
			}
			wantInv := []string{cmID(h.ns, "old")}
			if !tt.applyNone {
				wantInv = append(wantInv, cmID(h.ns, "new"), tt.wantID(h.ns))
			}
			wantKeys(t, "inventory", h.inventory(), wantInv...)
		})
	}
}

// TestWaitReadiness checks I6's evidence: Wait reports a Deployment Current once it is
// Available, and one that can never be scheduled times out with an error naming it and its
// kstatus message.
func TestWaitReadiness(t *testing.T) {
	h := newHarness(t, Hooks{})
	deploy := func(name string, nodeSelector map[string]any) *unstructured.Unstructured {
		pod := map[string]any{
			"containers": []any{map[string]any{"name": "c", "image": "example.invalid/app:1"}},
		}
		if nodeSelector != nil {
			pod["nodeSelector"] = nodeSelector
		}
		return obj("apps/v1", "Deployment", h.ns, name, map[string]any{"spec": map[string]any{
			"replicas": int64(1),
			"selector": map[string]any{"matchLabels": map[string]any{"app": name}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app": name}},
				"spec":     pod,
			},
		}})
	}
	opts := testOpts()
	opts.Wait = true
	opts.Timeout = 2 * time.Minute
	res := h.apply(opts, deploy("ready", nil))
	want := []ObjectHealth{{ID: h.ns + "_ready_apps_Deployment", Status: "Current"}}
	if diff := cmp.Diff(want, res.Health, cmpHealth); diff != "" {
		t.Errorf("health (-want +got):\n%s", diff)
	}

	opts.Timeout = 10 * time.Second
	res, err := h.eng.Apply(h.ctx, h.set(deploy("ready", nil), deploy("stuck", map[string]any{"no-such": "node"})), opts)
	id := "Deployment " + h.ns + "/stuck"
	if err == nil || !strings.Contains(err.Error(), id) || !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("Apply error = %v, want a timeout naming %s", err, id)
	}
	if strings.Contains(err.Error(), "Deployment "+h.ns+"/ready") {
		t.Errorf("the ready Deployment is named in the error: %v", err)
	}
	if s := res.Summary(); s.NotReady != 1 {
		t.Errorf("summary = %+v, want NotReady 1", s)
	}
}

var cmpHealth = cmp.Transformer("idStatus", func(h ObjectHealth) [2]string { return [2]string{h.ID, h.Status} })
