package engine

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/e2e/fault"
)

// The fault scenarios of docs/reliability.md against the real API server. Each names the
// invariants it checks; docs/reliability.md maps every scenario to its tests.

func cms(ns string, names ...string) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, 0, len(names))
	for _, n := range names {
		out = append(out, configMap(ns, n, map[string]any{"k": "v"}))
	}
	return out
}

// TestS05CrashAfterJthPrune crashes after the j-th prune, for every j, and restarts a cold
// engine: nothing foreign is deleted (I1), every unpruned owned object stays inventoried (I2,
// I3), and the restart prunes the rest (I7).
func TestS05CrashAfterJthPrune(t *testing.T) {
	for j := 1; j <= 3; j++ {
		t.Run(fmt.Sprintf("j=%d", j), func(t *testing.T) {
			crash := newHarness(t, Hooks{AfterPrune: func(i int, _ string) error {
				if i == j {
					return errCrash
				}
				return nil
			}})
			opts := testOpts()
			opts.Concurrency = 1
			crash.apply(opts, cms(crash.ns, "keep", "p1", "p2", "p3")...)
			foreign := annotate(configMap(crash.ns, "foreign", nil), OwnerAnnotation, "someone-else")
			if err := crash.plain.Create(crash.ctx, foreign); err != nil {
				t.Fatal(err)
			}
			if _, err := crash.eng.Apply(crash.ctx, crash.set(cms(crash.ns, "keep")...), opts); !errors.Is(err, errCrash) {
				t.Fatalf("Apply error = %v, want the crash", err)
			}
			crash.ownedSubsetOfInventory()

			h := newHarness(t, Hooks{})
			h.ns, h.ref = crash.ns, crash.ref
			h.apply(opts, cms(h.ns, "keep")...)
			for _, n := range []string{"p1", "p2", "p3"} {
				if h.liveCM(n) != nil {
					t.Errorf("%s survived the restart", n)
				}
			}
			if h.liveCM("foreign") == nil {
				t.Error("I1: the foreign object was deleted")
			}
			wantKeys(t, "inventory", h.inventory(), cmID(h.ns, "keep"))
		})
	}
}

// TestS11AmbiguousCommit forwards the inventory write-ahead and then an object apply but drops
// their responses (the write landed, the engine saw an error): every live owned object stays
// inventoried (I2), and the next run converges with every object recorded (I7).
func TestS11AmbiguousCommit(t *testing.T) {
	for _, rule := range []fault.Rule{
		{Verb: "create", Resource: "configmaps", Name: "", Times: 1, DropResponse: true}, // the write-ahead create
		{Verb: "patch", Resource: "configmaps", Name: "b", Times: 2, DropResponse: true}, // b's apply
	} {
		t.Run(rule.Verb, func(t *testing.T) {
			h := newHarness(t, Hooks{})
			opts := testOpts()
			h.rt.SetRules(rule)
			_, err := h.eng.Apply(h.ctx, h.set(cms(h.ns, "a", "b")...), opts)
			if err == nil {
				t.Fatal("Apply succeeded although a response was dropped")
			}
			h.ownedSubsetOfInventory()
			h.rt.SetRules()
			h.apply(opts, cms(h.ns, "a", "b")...)
			wantKeys(t, "inventory", h.inventory(), cmID(h.ns, "a"), cmID(h.ns, "b"))
			h.ownedSubsetOfInventory()
		})
	}
}

// TestS14ThrottledAPIServer answers 30% of requests with 429 and Retry-After (a seeded
// schedule): the engine still converges and the inventory stays a superset of what it owns
// (I2, I10), with no prune on a failure.
func TestS14ThrottledAPIServer(t *testing.T) {
	h := newHarness(t, Hooks{})
	h.rt.Seed(14)
	h.rt.SetRules(fault.Rule{Status: http.StatusTooManyRequests, Probability: 0.3})
	opts := testOpts()
	names := []string{"a", "b", "c", "d", "e", "f"}
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if _, err = h.eng.Apply(h.ctx, h.set(cms(h.ns, names...)...), opts); err == nil {
			break
		}
		h.ownedSubsetOfInventory()
	}
	if err != nil {
		t.Fatalf("no convergence under 30%% 429s after 5 reconciles: %v", err)
	}
	if h.rt.Injected() == 0 {
		t.Fatal("no 429 was injected: the scenario did not run")
	}
	h.rt.SetRules()
	want := make([]string, 0, len(names))
	for _, n := range names {
		want = append(want, cmID(h.ns, n))
	}
	wantKeys(t, "inventory", h.inventory(), want...)
}

// TestS15ForeignApplyManagerOwnsField has another server-side-apply manager own data.k
// and keep changing it: the engine reports the conflict on that object without taking the
// field over (I11), converges everything else (I7), and does not prune on the failure (I8).
func TestS15ForeignApplyManagerOwnsField(t *testing.T) {
	h := newHarness(t, Hooks{})
	opts := testOpts()
	h.apply(opts, cms(h.ns, "shared", "other")...)
	for i := 0; i < 2; i++ {
		theirs := configMap(h.ns, "shared", map[string]any{"k": fmt.Sprintf("theirs-%d", i)})
		if err := h.plain.Patch(h.ctx, theirs, client.Apply, client.FieldOwner("autoscaler"), client.ForceOwnership); err != nil { //nolint:staticcheck // SSA as another manager
			t.Fatal(err)
		}
		res, err := h.eng.Apply(h.ctx, h.set(cms(h.ns, "shared", "other", "new")...), opts)
		if err == nil || !strings.Contains(err.Error(), cmName(h.ns, "shared")) || IsTerminal(err) {
			t.Fatalf("round %d: Apply error = %v, want a transient conflict naming shared", i, err)
		}
		if got := actions(res.Changes)[cmID(h.ns, "new")]; got != ActionCreated && got != ActionUnchanged {
			t.Errorf("round %d: new = %s, want it applied despite the conflict", i, got)
		}
		if v, _, _ := unstructured.NestedString(h.liveCM("shared").Object, "data", "k"); v != fmt.Sprintf("theirs-%d", i) {
			t.Errorf("round %d: I11: data.k = %q, the other manager's value was overwritten", i, v)
		}
	}
	if h.liveCM("other") == nil {
		t.Error("I8: a failed apply pruned")
	}
}
