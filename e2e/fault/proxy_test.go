package fault

import (
	"context"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	"github.com/converge-dev/converge/e2e/cluster"
)

func newProxy(t *testing.T) (*Proxy, *kubernetes.Clientset, *kubernetes.Clientset, string) {
	t.Helper()
	cluster.Require(t, env)
	p, err := NewProxy(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	via, err := kubernetes.NewForConfig(p.Config())
	if err != nil {
		t.Fatal(err)
	}
	return p, via, env.Clientset(), env.Namespace(t)
}

func cm(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"k": "v"}}
}

// nextEvent returns the next event of w, failing after 30 s (a liveness bound).
func nextEvent(t *testing.T, w watch.Interface) (watch.Event, bool) {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		return ev, ok
	case <-time.After(30 * time.Second):
		t.Fatal("no watch event within 30 s")
		return watch.Event{}, false
	}
}

// TestProxyStreamsWatchesAndAppliesRules checks a watch through the proxy delivers an event
// as it happens (the proxy flushes streams), rules answer requests without reaching the
// server, and writes are counted.
func TestProxyStreamsWatchesAndAppliesRules(t *testing.T) {
	p, via, direct, ns := newProxy(t)
	ctx := t.Context()
	w, err := via.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := direct.CoreV1().ConfigMaps(ns).Create(ctx, cm("a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if ev, _ := nextEvent(t, w); ev.Type != watch.Added || ev.Object.(*corev1.ConfigMap).Name != "a" {
		t.Fatalf("event %s %T, want ADDED a", ev.Type, ev.Object)
	}

	p.SetRules(Rule{Verb: "patch", Resource: "configmaps", Times: 1, Status: http.StatusConflict})
	patch := []byte(`{"data":{"k":"patched"}}`)
	_, err = via.CoreV1().ConfigMaps(ns).Patch(ctx, "a", types.MergePatchType, patch, metav1.PatchOptions{})
	if !apierrors.IsConflict(err) {
		t.Fatalf("patch through a 409 rule: %v, want a conflict", err)
	}
	if got, _ := direct.CoreV1().ConfigMaps(ns).Get(ctx, "a", metav1.GetOptions{}); got.Data["k"] != "v" {
		t.Fatalf("the refused patch reached the server: data %v", got.Data)
	}
	if _, err := via.CoreV1().ConfigMaps(ns).Patch(ctx, "a", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if ev, _ := nextEvent(t, w); ev.Type != watch.Modified || ev.Object.(*corev1.ConfigMap).Data["k"] != "patched" {
		t.Errorf("event %s, want MODIFIED with the patch", ev.Type)
	}
	if n := len(p.Writes()); n != 2 {
		t.Errorf("%d writes counted, want the two patches: %v", n, p.Writes())
	}
}

// TestProxyBlackhole checks a blackholed write never reaches the server and fails on the
// client, and a watch open through the proxy breaks when the blackhole ends.
func TestProxyBlackhole(t *testing.T) {
	p, via, direct, ns := newProxy(t)
	ctx := t.Context()
	w, err := via.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	p.SetRules(Rule{Blackhole: true})
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := via.CoreV1().ConfigMaps(ns).Create(cctx, cm("lost"), metav1.CreateOptions{})
		done <- err
	}()
	waitFor(t, "the create to enter the blackhole", func() bool { return p.Faults()["blackhole"] >= 1 })
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a blackholed create succeeded")
	}
	if _, err := direct.CoreV1().ConfigMaps(ns).Create(ctx, cm("meanwhile"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the open watch to stall", func() bool { return p.Faults()["stall"] >= 1 })
	p.SetRules()
	if ev, ok := nextEvent(t, w); ok && ev.Type != watch.Error {
		t.Errorf("after the blackhole the open watch delivered %s, want it broken", ev.Type)
	}
	if _, err := direct.CoreV1().ConfigMaps(ns).Get(ctx, "lost", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the blackholed create reached the server: get err %v", err)
	}
}

// TestProxyExpireWatch checks a real client-go watch, with JSON and with protobuf, decodes
// the injected in-stream 410 as a resource-expired error.
func TestProxyExpireWatch(t *testing.T) {
	for _, contentType := range []string{"application/json", "application/vnd.kubernetes.protobuf"} {
		t.Run(contentType, func(t *testing.T) {
			p, _, _, ns := newProxy(t)
			cfg := p.Config()
			cfg.ContentType = contentType
			cfg.AcceptContentTypes = contentType + ",application/json"
			via, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			p.SetRules(Rule{Verb: "watch", ExpireWatch: true})
			w, err := via.CoreV1().ConfigMaps(ns).Watch(t.Context(), metav1.ListOptions{ResourceVersion: "1"})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			ev, _ := nextEvent(t, w)
			if err := apierrors.FromObject(ev.Object); ev.Type != watch.Error || !apierrors.IsResourceExpired(err) {
				t.Errorf("event %s (%v), want ERROR with 410 Expired", ev.Type, err)
			}
		})
	}
}

// TestProxyFreezeWatchFreezesInformer checks an informer through a frozen watch does not see
// a new object during the window and sees it once the window ends: a stale cache for one
// kind, from the outside.
func TestProxyFreezeWatchFreezesInformer(t *testing.T) {
	p, via, direct, ns := newProxy(t)
	ctx := t.Context()
	factory := informers.NewSharedInformerFactoryWithOptions(via, 0, informers.WithNamespace(ns))
	lister := factory.Core().V1().ConfigMaps().Lister()
	stop := make(chan struct{})
	defer func() { close(stop); factory.Shutdown() }()
	factory.Start(stop)
	factory.WaitForCacheSync(stop)

	p.SetRules(Rule{Verb: "watch", Resource: "configmaps", FreezeWatch: true})
	if _, err := direct.CoreV1().ConfigMaps(ns).Create(ctx, cm("new"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the watch to freeze", func() bool { return p.Faults()["freeze"] >= 1 })
	time.Sleep(200 * time.Millisecond) // give a broken freeze the chance to show (never fails a correct one)
	if _, err := lister.ConfigMaps(ns).Get("new"); !apierrors.IsNotFound(err) {
		t.Fatalf("the frozen informer saw the new object (err %v)", err)
	}
	p.SetRules()
	waitFor(t, "the informer to catch up", func() bool {
		_, err := lister.ConfigMaps(ns).Get("new")
		return err == nil
	})
}
