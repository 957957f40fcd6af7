package inventory

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/e2e/cluster"
)

var env *cluster.Cluster

func TestMain(m *testing.M) { cluster.Main(m, cluster.API, &env) }

// recorder counts requests by method and can answer the first n matching ones itself.
type recorder struct {
	next http.RoundTripper
	mu   sync.Mutex
	reqs []string // "METHOD path"
	// fail answers a request with a status instead of forwarding it, while it returns > 0.
	fail func(r *http.Request) int
}

func (c *recorder) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.reqs = append(c.reqs, r.Method+" "+r.URL.Path)
	fail := c.fail
	c.mu.Unlock()
	if fail != nil {
		if code := fail(r); code > 0 {
			reason := map[int]string{http.StatusConflict: "Conflict", http.StatusForbidden: "Forbidden"}[code]
			body := fmt.Sprintf(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":%q,"code":%d,"message":"injected"}`, reason, code)
			return &http.Response{StatusCode: code, Header: http.Header{"Content-Type": {"application/json"}},
				Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
		}
	}
	return c.next.RoundTrip(r)
}

func (c *recorder) count(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, r := range c.reqs {
		if strings.HasPrefix(r, method+" ") {
			n++
		}
	}
	return n
}

func newStore(t *testing.T) (*Store, *recorder, client.Client) {
	t.Helper()
	rec := &recorder{}
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { rec.next = rt; return rec })
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := client.New(env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return NewStore(c), rec, plain
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestStoreRoundTrip checks Get of a missing inventory, Write (create, update, no-op
// without a request: I7), the cli-utils format on the wire, and Delete.
func TestStoreRoundTrip(t *testing.T) {
	cluster.Require(t, env)
	ctx := testCtx(t)
	ns := env.Namespace(t)
	s, rec, plain := newStore(t)
	ref := Ref{Namespace: ns, Name: "inv", ID: "id-1"}

	got, err := s.Get(ctx, ref)
	if err != nil || got.Len() != 0 {
		t.Fatalf("Get of a missing inventory = %v, %v; want empty, nil", got.Entries(), err)
	}
	inv := New(e(ns, "a", "uid-a"), e(ns, "b", ""))
	if err := s.Write(ctx, ref, inv); err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := plain.Get(ctx, client.ObjectKey{Namespace: ns, Name: "inv"}, &cm); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{IDLabel: "id-1"}, cm.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	wantData := map[string]string{ns + "_a__ConfigMap": "uid-a", ns + "_b__ConfigMap": ""}
	if diff := cmp.Diff(wantData, cm.Data); diff != "" {
		t.Errorf("data (-want +got):\n%s", diff)
	}
	got, err = s.Get(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(inv.Entries(), got.Entries()); diff != "" {
		t.Errorf("Get after Write (-want +got):\n%s", diff)
	}

	writes := rec.count("PUT") + rec.count("POST")
	if err := s.Write(ctx, ref, got); err != nil {
		t.Fatal(err)
	}
	if n := rec.count("PUT") + rec.count("POST"); n != writes {
		t.Errorf("an unchanged Write sent %d writes, want 0", n-writes)
	}

	if err := s.Delete(ctx, ref, DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, ref); err != nil || got.Len() != 0 {
		t.Fatalf("Get after Delete = %v, %v; want empty", got.Entries(), err)
	}
	if err := s.Delete(ctx, ref, DeleteOptions{}); err != nil {
		t.Errorf("Delete of a missing inventory: %v", err)
	}
}

// TestStoreWriteConflictRereads checks that a 409 on the update makes Write re-read the
// ConfigMap from the API server and retry (RELIABILITY I10).
func TestStoreWriteConflictRereads(t *testing.T) {
	cluster.Require(t, env)
	ctx := testCtx(t)
	ns := env.Namespace(t)
	s, rec, _ := newStore(t)
	ref := Ref{Namespace: ns, Name: "inv", ID: "id-1"}
	if err := s.Write(ctx, ref, New(e(ns, "a", "1"))); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	conflicts := 2
	rec.fail = func(r *http.Request) int {
		mu.Lock()
		defer mu.Unlock()
		if r.Method == http.MethodPut && conflicts > 0 {
			conflicts--
			return http.StatusConflict
		}
		return 0
	}
	gets := rec.count("GET")
	want := New(e(ns, "a", "1"), e(ns, "b", "2"))
	if err := s.Write(ctx, ref, want); err != nil {
		t.Fatal(err)
	}
	if n := rec.count("GET") - gets; n != 3 {
		t.Errorf("Write after two conflicts read %d times, want 3 (one per attempt)", n)
	}
	got, err := s.Get(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want.Entries(), got.Entries()); diff != "" {
		t.Errorf("stored (-want +got):\n%s", diff)
	}
}

// TestStoreUpdateSeesConcurrentWriter checks that Update applies its change to what is
// stored at the time of the write, not to an earlier read: an entry another writer added
// after our read survives (I2 with two writers).
func TestStoreUpdateSeesConcurrentWriter(t *testing.T) {
	cluster.Require(t, env)
	ctx := testCtx(t)
	ns := env.Namespace(t)
	s, _, _ := newStore(t)
	other, _, _ := newStore(t)
	ref := Ref{Namespace: ns, Name: "inv", ID: "id-1"}
	if err := s.Write(ctx, ref, New(e(ns, "a", "1"))); err != nil {
		t.Fatal(err)
	}
	first := true
	got, err := s.Update(ctx, ref, func(stored *Inventory) *Inventory {
		if first { // another writer lands between our read and our write
			first = false
			if _, err := other.Update(ctx, ref, func(st *Inventory) *Inventory {
				return st.Union(New(e(ns, "c", "3")))
			}); err != nil {
				t.Error(err)
			}
		}
		return stored.Union(New(e(ns, "b", "")))
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{e(ns, "a", "1"), e(ns, "b", ""), e(ns, "c", "3")}
	if diff := cmp.Diff(want, got.Entries()); diff != "" {
		t.Errorf("Update result (-want +got):\n%s", diff)
	}
	stored, err := s.Get(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, stored.Entries()); diff != "" {
		t.Errorf("stored (-want +got):\n%s", diff)
	}
}

// TestStoreRefusesForeignConfigMap checks that a ConfigMap labelled with another inventory
// ID is neither read as ours nor overwritten nor deleted (I11).
func TestStoreRefusesForeignConfigMap(t *testing.T) {
	cluster.Require(t, env)
	ctx := testCtx(t)
	ns := env.Namespace(t)
	s, _, plain := newStore(t)
	foreign := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "inv",
		Labels: map[string]string{IDLabel: "other"}}, Data: map[string]string{ns + "_x__ConfigMap": ""}}
	if err := plain.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	ref := Ref{Namespace: ns, Name: "inv", ID: "mine"}
	if _, err := s.Get(ctx, ref); err == nil {
		t.Error("Get of another inventory's ConfigMap succeeded")
	}
	if err := s.Write(ctx, ref, New(e(ns, "a", ""))); err == nil {
		t.Error("Write over another inventory's ConfigMap succeeded")
	}
	if err := s.Delete(ctx, ref, DeleteOptions{}); err == nil {
		t.Error("Delete of another inventory's ConfigMap succeeded")
	}
	var cm corev1.ConfigMap
	if err := plain.Get(ctx, client.ObjectKeyFromObject(foreign), &cm); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(foreign.Data, cm.Data); diff != "" {
		t.Errorf("foreign data changed (-want +got):\n%s", diff)
	}
}
