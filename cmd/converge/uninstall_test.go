package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/cli-utils/pkg/object"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/cmd/converge/internal/installer"
	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/inventory"
)

// meddleAt says when meddlingEngine's other writer changes the inventory during a Delete.
type meddleAt int

const (
	// atHeadDelete: at the delete of the inventory ConfigMap, after the engine read it
	// (inventory.Store.Delete's conflict: the resourceVersion precondition fails).
	atHeadDelete meddleAt = iota
	// atFirstPrune: after the first object delete, before the engine records the deletes.
	atFirstPrune
	// objectConflict: nobody changes the inventory, but every DELETE of object a is answered
	// 409 (an admission webhook's denial, say); times counts those answers.
	objectConflict
)

// meddlingEngine applies ConfigMaps a and b under an inventory of a namespace of its own and
// returns an engine whose Deletes of it see another writer add an object to the inventory
// ("late-<k>", created under it) at the point at, the first times Deletes; and a count of
// the meddlings so far.
func meddlingEngine(t *testing.T, at meddleAt, times int) (*engine.Engine, inventory.Ref, client.Client, *atomic.Int32) {
	t.Helper()
	cluster.Require(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	ref := inventory.Ref{Namespace: ns, Name: "base-inventory", ID: "test-base-" + ns}
	c := env.Client(t)
	store := inventory.NewStore(c)
	meddled := new(atomic.Int32)
	meddle := func() error {
		if int(meddled.Load()) >= times {
			return nil
		}
		name := fmt.Sprintf("late-%d", meddled.Add(1))
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Annotations: map[string]string{engine.OwnerAnnotation: ref.ID}}}
		if err := c.Create(ctx, cm); err != nil {
			return err
		}
		id := object.ObjMetadata{Namespace: ns, Name: name, GroupKind: schema.GroupKind{Kind: "ConfigMap"}}
		_, err := store.Update(ctx, ref, func(stored *inventory.Inventory) *inventory.Inventory {
			return inventory.New(append(stored.Entries(), inventory.Entry{Object: id, UID: cm.UID})...)
		})
		return err
	}
	cfg := rest.CopyConfig(env.Config)
	var opts engine.Options
	switch at {
	case atHeadDelete:
		head := "/api/v1/namespaces/" + ns + "/configmaps/" + ref.Name
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
			return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
				if r.Method == http.MethodDelete && r.URL.Path == head {
					if err := meddle(); err != nil {
						return nil, err
					}
				}
				return rt.RoundTrip(r)
			})
		})
	case objectConflict:
		obj := "/api/v1/namespaces/" + ns + "/configmaps/a"
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
			return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
				if r.Method == http.MethodDelete && r.URL.Path == obj {
					meddled.Add(1)
					body := `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Conflict","code":409,"message":"denied by a webhook"}`
					return &http.Response{StatusCode: http.StatusConflict, Status: "409 Conflict", Request: r,
						Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(body))}, nil
				}
				return rt.RoundTrip(r)
			})
		})
	case atFirstPrune:
		opts.Hooks.AfterPrune = func(j int, _ string) error {
			if j != 1 {
				return nil
			}
			return meddle()
		}
	}
	eng, err := engine.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	for _, name := range []string{"a", "b"} {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("v1")
		u.SetKind("ConfigMap")
		u.SetNamespace(ns)
		u.SetName(name)
		objs = append(objs, u)
	}
	aopts := engine.DefaultApplyOptions()
	aopts.Wait = false
	if _, err := eng.Apply(ctx, engine.Set{Inventory: ref, Objects: objs}, aopts); err != nil {
		t.Fatal(err)
	}
	return eng, ref, c, meddled
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestUninstallRereadsChangedInventory: the inventory of the base changes while uninstall
// deletes it (another writer creates an object under it), twice; uninstall reads it again
// and deletes what it lists now, the objects added meanwhile included, as the daemon's
// finalizer does by requeueing. Without it, uninstall stopped at the first change: at the
// inventory's delete with Store.Delete's conflict (the object has been modified; please
// apply your changes to the latest version), after a stage with "1 objects still tracked";
// the inventory and late-1 left in place.
func TestUninstallRereadsChangedInventory(t *testing.T) {
	for name, at := range map[string]meddleAt{"at the inventory's delete": atHeadDelete, "after a delete": atFirstPrune} {
		t.Run(name, func(t *testing.T) {
			eng, ref, c, meddled := meddlingEngine(t, at, 2)
			res, err := installer.DeleteInventory(t.Context(), eng, ref)
			if err != nil {
				t.Fatalf("DeleteInventory of an inventory changed twice meanwhile: %v", err)
			}
			if n := meddled.Load(); n != 2 {
				t.Errorf("the inventory was changed %d times during the delete, want 2", n)
			}
			for _, name := range []string{"a", "b", "late-1", "late-2", ref.Name} {
				err := c.Get(t.Context(), client.ObjectKey{Namespace: ref.Namespace, Name: name}, &corev1.ConfigMap{})
				if !apierrors.IsNotFound(err) {
					t.Errorf("ConfigMap %s after DeleteInventory: %v, want NotFound", name, err)
				}
			}
			pruned := map[string]engine.Action{}
			for _, ch := range res.Pruned {
				pruned[ch.Object.Name] = ch.Action
			}
			for _, name := range []string{"a", "b", "late-1", "late-2"} {
				if pruned[name] != engine.ActionPruned {
					t.Errorf("result of %s: %q, want %q (results %v)", name, pruned[name], engine.ActionPruned, pruned)
				}
			}
		})
	}
}

// TestUninstallGivesUpOnEverChangingInventory: an inventory that changes during every
// attempt is not deleted: uninstall stops, bounded, with the conflict, and the inventory
// still lists the last object added (nothing created under it is left unlisted, I2).
func TestUninstallGivesUpOnEverChangingInventory(t *testing.T) {
	eng, ref, c, meddled := meddlingEngine(t, atHeadDelete, 1000)
	_, err := installer.DeleteInventory(t.Context(), eng, ref)
	if !apierrors.IsConflict(err) {
		t.Fatalf("DeleteInventory of an inventory that always changes: %v, want a conflict", err)
	}
	inv, err := inventory.NewStore(c).Get(t.Context(), ref)
	if err != nil {
		t.Fatal(err)
	}
	late := object.ObjMetadata{Namespace: ref.Namespace, Name: fmt.Sprintf("late-%d", meddled.Load()), GroupKind: schema.GroupKind{Kind: "ConfigMap"}}
	if !inv.Has(late) {
		t.Errorf("the inventory after the conflict does not list %s: %v", late.Name, inv.Entries())
	}
}

// TestUninstallDoesNotRetryAnObjectsConflict: a 409 on the delete of an object (not a change
// of the inventory) fails the uninstall at once with that error: it is not retried as if
// the inventory had changed (engine.ErrInventoryChanged). Without it, any conflict inside the
// joined error made uninstall delete again four more times and report a changed inventory.
func TestUninstallDoesNotRetryAnObjectsConflict(t *testing.T) {
	eng, ref, _, denied := meddlingEngine(t, objectConflict, 0)
	_, err := installer.DeleteInventory(t.Context(), eng, ref)
	if err == nil || errors.Is(err, engine.ErrInventoryChanged) || !strings.Contains(err.Error(), "denied by a webhook") {
		t.Fatalf("DeleteInventory with an object's delete denied (409): %v, want that error", err)
	}
	// Sent once as decided on the prune order's read of the object and once more on the
	// server's answer (a conflict may be that read gone stale), never as a new attempt of
	// the whole uninstall.
	if n := denied.Load(); n > 2 {
		t.Errorf("the denied object's delete was sent %d times, want at most twice", n)
	}
}
