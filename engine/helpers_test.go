package engine

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/cli-utils/pkg/object"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/e2e/fault"
	"github.com/converge-dev/converge/inventory"
)

var env *cluster.Cluster

// Full: the readiness tests need Deployments that really become Available.
func TestMain(m *testing.M) { cluster.Main(m, cluster.Full, &env) }

type harness struct {
	t     *testing.T
	ctx   context.Context
	ns    string
	ref   inventory.Ref
	eng   *Engine
	rt    *fault.Transport
	plain client.Client // uncached, unfaulted: the independent checker
}

func newHarness(t *testing.T, hooks Hooks) *harness {
	t.Helper()
	cluster.Require(t, env)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	t.Cleanup(cancel)
	ns := env.Namespace(t)
	cfg, rt := fault.Config(env.Config)
	eng, err := New(cfg, Options{Hooks: hooks, PollInterval: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := client.New(env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, ctx: ctx, ns: ns, eng: eng, rt: rt, plain: plain,
		ref: inventory.Ref{Namespace: ns, Name: "inventory", ID: "inv-" + ns}}
}

func (h *harness) set(objs ...*unstructured.Unstructured) Set {
	return Set{Inventory: h.ref, Objects: objs}
}

// opts are the test defaults: prune, no wait, one object at a time for determinism.
func testOpts() ApplyOptions {
	o := DefaultApplyOptions()
	o.Wait = false
	o.Concurrency = 4
	o.Timeout = time.Minute
	return o
}

func (h *harness) apply(opts ApplyOptions, objs ...*unstructured.Unstructured) *Result {
	h.t.Helper()
	res, err := h.eng.Apply(h.ctx, h.set(objs...), opts)
	if err != nil {
		h.t.Fatalf("Apply: %v", err)
	}
	return res
}

// inventoryIDs returns the stored inventory as id -> UID, read by an independent client.
func (h *harness) inventory() map[string]types.UID {
	h.t.Helper()
	inv, err := inventory.NewStore(h.plain).Get(h.ctx, h.ref)
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[string]types.UID{}
	for _, e := range inv.Entries() {
		out[e.Object.String()] = e.UID
	}
	return out
}

// live reads an object by kind/namespace/name; nil when missing.
func (h *harness) live(apiVersion, kind, ns, name string) *unstructured.Unstructured {
	h.t.Helper()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	err := h.plain.Get(h.ctx, client.ObjectKey{Namespace: ns, Name: name}, u)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return u
}

func (h *harness) liveCM(name string) *unstructured.Unstructured {
	return h.live("v1", "ConfigMap", h.ns, name)
}

// actions maps change IDs to actions.
func actions(cs []Change) map[string]Action {
	out := map[string]Action{}
	for _, c := range cs {
		out[c.ID] = c.Action
	}
	return out
}

// cmName is how messages name a ConfigMap: "ConfigMap ns/name".
func cmName(ns, name string) string { return "ConfigMap " + ns + "/" + name }

func cmID(ns, name string) string {
	return object.ObjMetadata{Namespace: ns, Name: name, GroupKind: schema.GroupKind{Kind: "ConfigMap"}}.String()
}

func obj(apiVersion, kind, ns, name string, fields map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	for k, v := range fields {
		u.Object[k] = v
	}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	u.SetName(name)
	if ns != "" {
		u.SetNamespace(ns)
	}
	return u
}

func configMap(ns, name string, data map[string]any) *unstructured.Unstructured {
	return obj("v1", "ConfigMap", ns, name, map[string]any{"data": data})
}

func annotate(u *unstructured.Unstructured, kv ...string) *unstructured.Unstructured {
	a := u.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	for i := 0; i+1 < len(kv); i += 2 {
		a[kv[i]] = kv[i+1]
	}
	u.SetAnnotations(a)
	return u
}

// wantKeys compares the keys of a map with want, order-free.
func wantKeys[V any](t *testing.T, what string, m map[string]V, want ...string) {
	t.Helper()
	got := make([]string, 0, len(m))
	for k := range m {
		got = append(got, k)
	}
	sort.Strings(got)
	sort.Strings(want)
	if want == nil {
		want = []string{}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s (-want +got):\n%s", what, diff)
	}
}

// ownedSubsetOfInventory checks I2: every live ConfigMap of the namespace carrying our
// owner annotation is in the stored inventory.
func (h *harness) ownedSubsetOfInventory() {
	h.t.Helper()
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("v1")
	list.SetKind("ConfigMapList")
	if err := h.plain.List(h.ctx, list, client.InNamespace(h.ns)); err != nil {
		h.t.Fatal(err)
	}
	inv := h.inventory()
	for _, u := range list.Items {
		if u.GetAnnotations()[OwnerAnnotation] != h.ref.ID {
			continue
		}
		if _, ok := inv[cmID(h.ns, u.GetName())]; !ok {
			h.t.Errorf("I2: live %s carries our owner annotation but is not in the inventory %v", u.GetName(), inv)
		}
	}
}

func entryOf(u *unstructured.Unstructured) inventory.Entry {
	return inventory.Entry{Object: idOf(u), UID: u.GetUID()}
}
