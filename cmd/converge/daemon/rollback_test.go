package daemon

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/e2e/fault"
	"github.com/converge-dev/converge/status"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// rolledBackTo reports a Sync Ready at rev by a rollback away from from.
func rolledBackTo(rev, from string) func(*v1alpha1.Sync) bool {
	return func(s *v1alpha1.Sync) bool {
		r := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
		return readyAt(rev)(s) && r.Reason == reasonRolledBack && s.Status.RolledBack != nil &&
			s.Status.RolledBack.From == from && s.Status.RolledBack.To == rev
	}
}

// notRolledBack reports a Sync Ready at rev that applies its head, not rolled back.
func notRolledBack(rev string) func(*v1alpha1.Sync) bool {
	return func(s *v1alpha1.Sync) bool {
		r := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
		return readyAt(rev)(s) && r.Reason == reasonSucceeded && s.Status.RolledBack == nil
	}
}

func (f *fixture) wantVersion(name, want string) {
	f.t.Helper()
	cm, err := f.configMap(name)
	if err != nil || cm.Data["version"] != want {
		f.t.Errorf("ConfigMap %s: %v %v, want version %s", name, cm.Data, err, want)
	}
}

// TestAutoRollback: a commit whose Deployment never becomes ready fails its health checks
// after spec.timeout; with spec.autoRollback the Sync applies the last Ready revision again
// (its ConfigMap back, the Deployment pruned), Ready with reason RolledBack, a RolledBack
// event, both outcomes in the history; the next commit is applied normally.
func TestAutoRollback(t *testing.T) {
	f := newFixture(t)
	cm := func(v string) string { return strings.Replace(cmA, "VERSION", v, 1) }
	rev1 := f.publish(map[string]string{"a.yaml": cm("1")})
	f.startDaemon(env.Config)
	f.createSync(time.Hour, func(s *v1alpha1.Sync) {
		s.Spec.AutoRollback, s.Spec.Prune = true, true
		s.Spec.Timeout = &metav1.Duration{Duration: 3 * time.Second}
	})
	f.waitSync("Ready at the first commit", readyAt(rev1))

	rev2 := f.publish(map[string]string{"a.yaml": cm("2"), "web.yaml": neverReady})
	f.requestReconcile("app")
	s := f.waitSync("rolled back to the first commit", rolledBackTo(rev1, rev2))
	f.wantVersion("a", "1")
	if r := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady); !strings.Contains(r.Message, "rolled back from "+rev2) ||
		!strings.Contains(s.Status.RolledBack.Reason, "Deployment "+f.ns+"/web") {
		t.Errorf("Ready %q, rolledBack %+v: want both to name %s and why it failed", r.Message, s.Status.RolledBack, rev2)
	}
	if err := f.c.Get(t.Context(), client.ObjectKey{Namespace: f.ns, Name: "web"}, &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
		t.Errorf("the failed revision's Deployment is still there: %v", err)
	}
	seen := map[string]string{}
	for _, h := range s.Status.History {
		seen[h.Revision+" "+h.Reason] = string(h.Ready)
	}
	if seen[rev2+" "+reasonHealthCheck] != "False" || seen[rev1+" "+reasonRolledBack] != "True" {
		t.Errorf("history %v: want %s HealthCheckFailed and %s RolledBack", seen, rev2, rev1)
	}
	if ev := f.syncEvents(); !strings.Contains(ev, "RolledBack") || !strings.Contains(ev, "rolled back from "+rev2+" to "+rev1) {
		t.Errorf("no RolledBack event: %s", ev)
	}

	rev3 := f.publish(map[string]string{"a.yaml": cm("3"), "web.yaml": ""})
	f.requestReconcile("app")
	f.waitSync("the next commit applied", notRolledBack(rev3))
	f.wantVersion("a", "3")
}

// TestRollbackPin: spec.rollback applies the revision it names while the source is at a
// later one, until it is removed; with until NewRevision the next commit lifts it.
func TestRollbackPin(t *testing.T) {
	f := newFixture(t)
	cm := func(v string) string { return strings.Replace(cmA, "VERSION", v, 1) }
	rev1 := f.publish(map[string]string{"a.yaml": cm("1")})
	f.startDaemon(env.Config)
	f.createSync(time.Hour)
	f.waitSync("Ready at the first commit", readyAt(rev1))
	rev2 := f.publish(map[string]string{"a.yaml": cm("2")})
	f.requestReconcile("app")
	f.waitSync("Ready at the second commit", notRolledBack(rev2))

	f.updateSync("app", func(s *v1alpha1.Sync) { s.Spec.Rollback = &v1alpha1.Rollback{Revision: rev1} })
	f.waitSync("pinned to the first commit", rolledBackTo(rev1, rev2))
	f.wantVersion("a", "1")
	f.updateSync("app", func(s *v1alpha1.Sync) { s.Spec.Rollback = nil })
	f.waitSync("the pin lifted", notRolledBack(rev2))
	f.wantVersion("a", "2")

	f.updateSync("app", func(s *v1alpha1.Sync) {
		s.Spec.Rollback = &v1alpha1.Rollback{Revision: rev1, Until: v1alpha1.RollbackUntilNewRevision, From: rev2}
	})
	f.waitSync("pinned until a new commit", rolledBackTo(rev1, rev2))
	rev3 := f.publish(map[string]string{"a.yaml": cm("3")})
	f.requestReconcile("app")
	f.waitSync("the new commit lifted the pin", notRolledBack(rev3))
	f.wantVersion("a", "3")
}

// TestRollbackRefusedAcrossACRDRemoval: a rollback to a revision without a CRD the Sync
// applies is refused (RollbackRefused naming the CRD), and the CRD stays; so is a revision
// that is not one of the source's.
func TestRollbackRefusedAcrossACRDRemoval(t *testing.T) {
	f := newFixture(t)
	rev1 := f.publish(map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "1", 1)})
	f.startDaemon(env.Config)
	f.createSync(time.Hour, func(s *v1alpha1.Sync) { s.Spec.Prune = true })
	f.waitSync("Ready at the first commit", readyAt(rev1))
	rev2 := f.publish(map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "2", 1), "crd.yaml": gadgetCRD("rollback.example.com")})
	f.requestReconcile("app")
	f.waitSync("Ready with the CRD", notRolledBack(rev2))

	f.updateSync("app", func(s *v1alpha1.Sync) { s.Spec.Rollback = &v1alpha1.Rollback{Revision: rev1} })
	f.waitSync("the rollback refused", readyFalse(reasonRollbackRefused, "gadgets.rollback.example.com"))
	f.wantVersion("a", "2")
	f.updateSync("app", func(s *v1alpha1.Sync) {
		s.Spec.Rollback = &v1alpha1.Rollback{Revision: "v9@sha256:" + strings.Repeat("0", 64)}
	})
	f.waitSync("a digest refused for a git source", readyFalse(reasonRollbackRefused, "does not name a git commit"))
}

// TestRollbackRefusedOverPruneBudget: a rollback that would prune more objects than
// spec.pruneBudget is refused as a rollback (RollbackRefused, naming the budget), nothing
// applied or pruned; an automatic one is refused once for its head, as the CRD guard's.
// Without it: the manual rollback failed as ApplyFailed and the automatic one was decided
// again at each reconcile.
func TestRollbackRefusedOverPruneBudget(t *testing.T) {
	f := newFixture(t)
	cm := func(name string) string { return strings.Replace(cmB, "name: b", "name: "+name, 1) }
	rev1 := f.publish(map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "1", 1)})
	f.startDaemon(env.Config)
	f.createSync(time.Hour, func(s *v1alpha1.Sync) { s.Spec.Prune, s.Spec.PruneBudget = true, 1 })
	f.waitSync("Ready at the first commit", readyAt(rev1))
	rev2 := f.publish(map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "2", 1), "b.yaml": cm("b"), "c.yaml": cm("c")})
	f.requestReconcile("app")
	f.waitSync("Ready with b and c", notRolledBack(rev2))

	f.updateSync("app", func(s *v1alpha1.Sync) { s.Spec.Rollback = &v1alpha1.Rollback{Revision: rev1} })
	f.waitSync("the rollback refused", readyFalse(reasonRollbackRefused, "spec.pruneBudget"))
	f.wantVersion("a", "2")
	for _, name := range []string{"b", "c"} {
		if _, err := f.configMap(name); err != nil {
			t.Errorf("the refused rollback pruned %s: %v", name, err)
		}
	}

	f.updateSync("app", func(s *v1alpha1.Sync) {
		s.Spec.Rollback, s.Spec.AutoRollback = nil, true
		s.Spec.Timeout = &metav1.Duration{Duration: 2 * time.Second}
	})
	f.waitSync("Ready at the head again", notRolledBack(rev2))
	rev3 := f.publish(map[string]string{"d.yaml": cm("d"), "web.yaml": neverReady})
	f.requestReconcile("app")
	f.waitSync("the automatic rollback refused", readyFalse(reasonRollbackRefused, "spec.pruneBudget"))
	f.requestReconcile("app")
	f.waitSync("failed at the head again, the refusal kept", func(s *v1alpha1.Sync) bool {
		rb := s.Status.RolledBack
		return readyFalse(reasonHealthCheck, "Deployment "+f.ns+"/web")(s) && rb != nil && rb.From == rev3 && rb.To == "" &&
			s.Status.LastAttemptedRevision == rev3
	})
	if _, err := f.configMap("d"); err != nil {
		t.Errorf("the refused automatic rollback pruned d: %v", err)
	}
}

// gadgetCRD is the CRD of kind Gadget in group (cluster-scoped: one group per test).
func gadgetCRD(group string) string {
	return strings.ReplaceAll(rollbackCRD, "GROUP", group)
}

const rollbackCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.GROUP}
spec:
  group: GROUP
  names: {kind: Gadget, plural: gadgets}
  scope: Namespaced
  versions:
  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
`

// TestRolledBackIsNotified: an automatic rollback sends the failing revision's Failed, then,
// once the revision rolled back to is applied and Ready, RolledBack naming the revision left
// (as notify.Event documents) and BecameReady of the one applied; the
// rollback's next reconciles send nothing more.
func TestRolledBackIsNotified(t *testing.T) {
	f := newFixture(t)
	rev1 := f.publish(map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "1", 1)})
	url, got := hmacReceiver(t)
	f.notifyingDaemon(url, env.Config)
	f.waitSync("Ready at the first commit", readyAt(rev1))
	receive(t, got, "BecameReady")
	f.updateSync("app", func(s *v1alpha1.Sync) {
		s.Spec.AutoRollback, s.Spec.Prune = true, true
		s.Spec.Timeout = &metav1.Duration{Duration: 3 * time.Second}
	})
	f.waitSync("Ready at the new generation", readyAt(rev1))
	rev2 := f.publish(map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "2", 1), "web.yaml": neverReady})
	f.waitSync("rolled back", rolledBackTo(rev1, rev2))

	var sent []string
	for len(sent) < 3 {
		n := receive(t, got, "the rollback's notifications")
		sent = append(sent, n.Transition+" "+n.Revision)
	}
	// The last two leave one reconcile together, to two delivery workers: in either order.
	slices.Sort(sent[1:])
	want := []string{"Failed " + rev2, "BecameReady " + rev1, "RolledBack " + rev2}
	if !slices.Equal(sent, want) {
		t.Errorf("sent %v, want %v", sent, want)
	}
	f.waitSync("still rolled back", rolledBackTo(rev1, rev2))
	select {
	case n := <-got:
		t.Errorf("a reconcile of the rollback sent %+v", n)
	case <-time.After(3 * time.Second): // the Sync's interval is 2 s
	}
}

// stalledGadget is a custom resource that kstatus reads as Failed (Stalled=True), and its
// CRD, without a status subresource, so the source sets the status.
const stalledGadget = `apiVersion: failed.example.com/v1
kind: Gadget
metadata: {name: broken, namespace: NS}
status:
  conditions: [{type: Stalled, status: "True", reason: Broken, message: never works}]
`

// TestAutoRollbackOnAFailedObject: an object that is Failed (not only not ready yet) fails
// the revision at once, and the automatic rollback applies the last Ready one.
func TestAutoRollbackOnAFailedObject(t *testing.T) {
	f := newFixture(t)
	cm := func(v string) string { return strings.Replace(cmA, "VERSION", v, 1) }
	rev1 := f.publish(map[string]string{"a.yaml": cm("1"), "crd.yaml": gadgetCRD("failed.example.com")})
	f.startDaemon(env.Config)
	f.createSync(time.Hour, func(s *v1alpha1.Sync) {
		s.Spec.AutoRollback, s.Spec.Prune = true, true
		s.Spec.Timeout = &metav1.Duration{Duration: time.Hour}
	})
	f.waitSync("Ready at the first commit", readyAt(rev1))
	rev2 := f.publish(map[string]string{"a.yaml": cm("2"), "gadget.yaml": stalledGadget})
	f.requestReconcile("app")
	f.waitSync("rolled back from the Failed object", rolledBackTo(rev1, rev2))
	f.wantVersion("a", "1")
}

// TestAutoRollbackRefusedOnce: an automatic rollback the CRD guard refuses is refused once for
// that revision: status.rolledBack keeps the refusal, the Sync stays failed at the head, and no
// RolledBack event says it went back.
func TestAutoRollbackRefusedOnce(t *testing.T) {
	f := newFixture(t)
	rev1 := f.publish(map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "1", 1)})
	f.startDaemon(env.Config)
	f.createSync(time.Hour, func(s *v1alpha1.Sync) {
		s.Spec.AutoRollback, s.Spec.Prune = true, true
		s.Spec.Timeout = &metav1.Duration{Duration: 2 * time.Second}
	})
	f.waitSync("Ready at the first commit", readyAt(rev1))
	rev2 := f.publish(map[string]string{"crd.yaml": gadgetCRD("refused.example.com"), "web.yaml": neverReady})
	f.requestReconcile("app")
	f.waitSync("the rollback refused", readyFalse(reasonRollbackRefused, "gadgets.refused.example.com"))
	refusedAt := func(s *v1alpha1.Sync) bool {
		rb := s.Status.RolledBack
		return rb != nil && rb.From == rev2 && rb.To == "" && s.Status.LastAttemptedRevision == rev2
	}
	// Stalled on the refusal until asked again; then the head is applied and fails again,
	// and the rollback is not tried again for it.
	f.requestReconcile("app")
	s := f.waitSync("failed at the head again, the refusal kept", func(s *v1alpha1.Sync) bool {
		return readyFalse(reasonHealthCheck, "Deployment "+f.ns+"/web")(s) && refusedAt(s)
	})
	if ev := f.syncEvents(); strings.Contains(ev, "RolledBack") {
		t.Errorf("a RolledBack event for a rollback that was refused: %s", ev)
	}
	if err := f.c.Get(t.Context(), client.ObjectKey{Name: "gadgets.refused.example.com"}, &apiextensionsv1.CustomResourceDefinition{}); err != nil {
		t.Errorf("the CRD: %v (status %+v)", err, s.Status.RolledBack)
	}
}

// TestRolledBackSyncReadsNoSyncPerReconcile: a Sync that stays rolled back is reconciled
// from the cache like any other. The check for dropped CRDs read its recovery copy from the
// API server once (the cache keeps a digest of it); the interval's reconciles after it find
// the same copy and the same CRDs and read nothing, and write nothing.
func TestRolledBackSyncReadsNoSyncPerReconcile(t *testing.T) {
	f := newFixture(t)
	cm := func(v string) string { return strings.Replace(cmA, "VERSION", v, 1) }
	rev1 := f.publish(map[string]string{"a.yaml": cm("1")})
	addr := cluster.FreeAddr()
	cfg, ft := fault.Config(env.Config)
	f.startDaemon(cfg, func(o *Options) { o.MetricsAddr = addr })
	f.createSync(2 * time.Second)
	f.waitSync("Ready at the first commit", readyAt(rev1))
	rev2 := f.publish(map[string]string{"a.yaml": cm("2")})
	f.waitSync("Ready at the second commit", notRolledBack(rev2))
	f.updateSync("app", func(s *v1alpha1.Sync) { s.Spec.Rollback = &v1alpha1.Rollback{Revision: rev1} })
	pinned := f.waitSync("pinned to the first commit", rolledBackTo(rev1, rev2))

	const reconciles = "converge_reconciles_total"
	n := f.scrape(addr, reconciles)
	ft.Reset()
	f.waitMetric(addr, reconciles, n+3)
	if g := ft.CountResource("get", "syncs", ""); g != 0 {
		t.Errorf("the interval's reconciles of a Sync rolled back read it %d times from the API server, want 0", g)
	}
	if s := f.waitSync("pinned to the first commit", rolledBackTo(rev1, rev2)); s.ResourceVersion != pinned.ResourceVersion {
		t.Errorf("the Sync was written while it stayed rolled back: resourceVersion %s, then %s", pinned.ResourceVersion, s.ResourceVersion)
	}
}

// TestRollbackCheckPassIsNotTakenFromALaggingCache: the check for dropped CRDs passed on the
// recovery copy the cache shows, and since then a status write recorded a copy with a CRD
// (the head applied it). A cache still showing the old copy is behind our own write: the
// check reads the API server again and refuses, instead of taking the old pass.
func TestRollbackCheckPassIsNotTakenFromALaggingCache(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := installSyncCRD(ctx, env.Config, f.c); err != nil { // no daemon runs here to install it
		t.Fatal(err)
	}
	s := f.createSync(time.Hour)
	key := client.ObjectKeyFromObject(s)
	w := &status.Writer{Live: f.c, Client: f.c}
	r := &reconciler{states: newSyncStates(), writer: w, live: f.c}
	copyOf := func(ids ...string) *v1alpha1.InventoryStatus {
		inv := &v1alpha1.InventoryStatus{Name: "app-inventory", Entries: len(ids)}
		for i, id := range ids {
			inv.Objects = append(inv.Objects, v1alpha1.InventoryObject{ID: id, UID: fmt.Sprintf("u%d", i)})
		}
		return inv
	}
	write := func(rev string, inv *v1alpha1.InventoryStatus) *v1alpha1.Sync {
		t.Helper()
		o := status.Outcome{UID: s.UID, Generation: 1, Ready: metav1.ConditionTrue, Reason: reasonSucceeded,
			AttemptedRevision: rev, AppliedRevision: rev, Inventory: inv}
		if err := w.Write(ctx, key, o); err != nil {
			t.Fatal(err)
		}
		cached := &v1alpha1.Sync{}
		if err := f.c.Get(ctx, key, cached); err != nil {
			t.Fatal(err)
		}
		if _, err := status.CompactInventory(cached); err != nil {
			t.Fatal(err)
		}
		return cached
	}
	r.states.observe(key, s.UID)
	cm := &unstructured.Unstructured{}
	cm.SetAPIVersion("v1")
	cm.SetKind("ConfigMap")
	cm.SetName("a")
	revision := []*unstructured.Unstructured{cm}

	old := write("main@sha1:1111111111111111111111111111111111111111", copyOf(f.ns+"_a__ConfigMap"))
	if dropped, err := r.rollbackDropsCRDs(ctx, old, revision); err != nil || len(dropped) != 0 {
		t.Fatalf("first check: %v, %v; want a pass", dropped, err)
	}
	write("main@sha1:2222222222222222222222222222222222222222", copyOf(f.ns+"_a__ConfigMap", "_gadgets.example.com_apiextensions.k8s.io_CustomResourceDefinition"))
	dropped, err := r.rollbackDropsCRDs(ctx, old, revision)
	if err != nil || !slices.Equal(dropped, []string{"gadgets.example.com"}) {
		t.Errorf("check on a cache behind the write of a copy with a CRD: %v, %v; want gadgets.example.com dropped", dropped, err)
	}
}
