package main

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/converge-dev/converge/e2e/cluster"
)

// countingTransport counts the requests that go through it.
type countingTransport struct {
	next http.RoundTripper
	n    *atomic.Int64
}

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.n.Add(1)
	return t.next.RoundTrip(r)
}

// TestSweepTenantsRequestsGrowWithNamespaces sweeps tenant namespaces, some holding a left
// object, on a real API server and counts the sweep's requests: a bounded number per
// namespace. The scale scenario sweeps 1,000 of them; finalizing one Terminating namespace
// per wait round (and GETting every namespace before it again) did not end in the hour.
func TestSweepTenantsRequestsGrowWithNamespaces(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Options{Profile: cluster.API})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	setup, err := newAdmin(c.Config, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	const count = 60
	namespaces := make([]string, count)
	for i := range namespaces {
		namespaces[i] = fmt.Sprintf("sweep-%02d", i)
		if err := setup.ensureNamespace(ctx, namespaces[i]); err != nil {
			t.Fatal(err)
		}
		if i%10 == 0 { // a few objects the daemon would have left
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespaces[i], Name: "left"}}
			if err := setup.c.Create(ctx, cm); err != nil {
				t.Fatal(err)
			}
		}
	}

	var requests atomic.Int64
	cfg := rest.CopyConfig(c.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return countingTransport{next: rt, n: &requests} }
	a, err := newAdmin(cfg, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	requests.Store(0) // newAdmin's discovery is not the sweep's
	leftover, err := a.sweepTenants(ctx, namespaces, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if leftover != count/10 {
		t.Errorf("leftover = %d, want %d (one ConfigMap in every tenth namespace)", leftover, count/10)
	}
	for _, ns := range namespaces {
		if gone, err := setup.namespaceGone(ctx, ns); err != nil || !gone {
			t.Errorf("namespace %s not gone after the sweep (err %v)", ns, err)
		}
	}
	// Per namespace: a LIST per leaf kind (and the deletion of what is left), the DELETE of
	// the Namespace, then a few GETs and a finalize while it goes away. Discovery of the leaf
	// kinds comes on top, once.
	perNamespace := int64(len(leafGVKs) + 8)
	if got, limit := requests.Load(), perNamespace*count+50; got > limit {
		t.Errorf("the sweep of %d namespaces made %d requests, want at most %d (%d per namespace)", count, got, limit, perNamespace)
	}
	t.Logf("the sweep of %d namespaces made %d requests", count, requests.Load())
}
