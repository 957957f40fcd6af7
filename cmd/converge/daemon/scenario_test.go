package daemon

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/cmd/converge/internal/synctest"
	"github.com/converge-dev/converge/status/v1alpha1"

	"github.com/converge-dev/converge/e2e/fault"
)

// TestS13WatchesClosedAndRelistFails closes the daemon's watches with 410 Gone again and
// again and fails its first Sync relists with 503: the daemon still converges (I7), reports
// through status (I10), and a bad window never prunes (I8: the ConfigMap survives).
func TestS13WatchesClosedAndRelistFails(t *testing.T) {
	f := newFixture(t)
	rev := f.publish(map[string]string{"b.yaml": cmB})
	cfg, ft := fault.Config(env.Config)
	ft.SetRules(
		fault.Rule{Verb: "watch", Times: 20, Status: http.StatusGone},
		fault.Rule{Verb: "list", Resource: "syncs", Times: 3, Status: http.StatusServiceUnavailable},
	)
	f.startDaemon(cfg)
	f.createSync(2 * time.Second)
	f.waitSync("Ready despite closed watches", readyAt(rev))
	if ft.Injected() == 0 {
		t.Fatal("no fault was injected: the scenario did not run")
	}
	if _, err := f.configMap("b"); err != nil {
		t.Errorf("configmap b: %v", err)
	}
}

// failing serves its target until failing is set, then answers 503 to the requests that
// match; it counts the requests it failed.
type failing struct {
	next   http.RoundTripper
	match  func(*http.Request) bool
	on     atomic.Bool
	failed atomic.Int64
}

func (f *failing) RoundTrip(req *http.Request) (*http.Response, error) {
	if f.on.Load() && f.match(req) {
		f.failed.Add(1)
		return &http.Response{StatusCode: http.StatusServiceUnavailable, Status: "503 Service Unavailable",
			Header: http.Header{"Content-Type": {"text/plain"}}, Body: io.NopCloser(strings.NewReader("unavailable")),
			Request: req}, nil
	}
	return f.next.RoundTrip(req)
}

// isDiscovery matches the API server's discovery documents: /api, /apis, /api/v1,
// /apis/<group>/<version>.
func isDiscovery(req *http.Request) bool {
	p := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	return (p[0] == "api" && len(p) <= 2) || (p[0] == "apis" && len(p) <= 3)
}

// TestS10GitAndDiscoveryOutages is S10 through the daemon: a commit that drops an object
// arrives while the git server answers 503; later a commit that drops another and adds a
// custom resource of a CRD the daemon has never seen arrives while API discovery answers 503.
// Each outage surfaces as Ready=False (I10) and prunes nothing (I8: the dropped object stays,
// the inventory keeps it, I2); once the outage ends the daemon converges (I7).
func TestS10GitAndDiscoveryOutages(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	git := &failing{next: http.DefaultTransport, match: func(*http.Request) bool { return true }}
	target, err := url.Parse(f.git.URL)
	if err != nil {
		t.Fatal(err)
	}
	gitProxy := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(target) }, Transport: git})
	defer gitProxy.Close()
	rev1 := f.publish(map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "1", 1), "b.yaml": cmB})

	cfg := rest.CopyConfig(env.Config)
	discovery := &failing{match: isDiscovery}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { discovery.next = rt; return discovery })
	f.startDaemon(cfg)
	s := f.createSync(2*time.Second, func(s *v1alpha1.Sync) { s.Spec.Source.Git.URL = gitProxy.URL + "/app.git" })
	f.waitSync("Ready at the first commit", readyAt(rev1))

	notReadyAt := func(rev string) func(*v1alpha1.Sync) bool {
		return func(s *v1alpha1.Sync) bool {
			return meta.IsStatusConditionFalse(s.Status.Conditions, v1alpha1.ConditionReady) && s.Status.LastAppliedRevision == rev
		}
	}
	kept := func(name, during string) {
		t.Helper()
		if _, err := f.configMap(name); err != nil {
			t.Errorf("I8: configmap %s was pruned during %s: %v", name, during, err)
		}
		f.ownedInventoried(s)
	}

	git.on.Store(true)
	rev2 := f.publish(map[string]string{"b.yaml": ""})
	f.waitSync("Ready=False while git answers 503", notReadyAt(rev1))
	kept("b", "the git outage")
	git.on.Store(false)
	f.waitSync("Ready after git recovered", readyAt(rev2))

	// A CRD the daemon has never seen, created out of band; its kind needs discovery.
	group := strings.ReplaceAll(f.ns, "-", "") + ".s10.converge.dev"
	crd := strings.NewReplacer("widgets.cli.converge.dev", "widgets."+group, "cli.converge.dev", group).Replace(widgetCRD)
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(crd), &u.Object); err != nil {
		t.Fatal(err)
	}
	if err := f.c.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.c.Delete(context.Background(), u) })
	discovery.on.Store(true)
	rev3 := f.publish(map[string]string{"a.yaml": "", "w.yaml": strings.ReplaceAll(widget, "cli.converge.dev", group)})
	f.waitSync("Ready=False while discovery answers 503", notReadyAt(rev2))
	kept("a", "the discovery outage")
	discovery.on.Store(false)

	f.waitSync("Ready once discovery recovered", readyAt(rev3))
	if _, err := f.configMap("a"); !apierrors.IsNotFound(err) {
		t.Errorf("configmap a left the repository but was not pruned after recovery: %v", err)
	}
	if git.failed.Load() == 0 || discovery.failed.Load() == 0 {
		t.Errorf("outages not exercised: %d git, %d discovery requests failed", git.failed.Load(), discovery.failed.Load())
	}
}

// TestS02ConflictStormOnManagedObjects is S02 on the managed objects: the first applies of
// the Sync's ConfigMaps (and the first status writes) get 409. The failure is surfaced and
// retried with back-off, not looped on (I10), and the Sync converges to Ready with
// observedGeneration == generation (I4) and live state as desired (I7).
func TestS02ConflictStormOnManagedObjects(t *testing.T) {
	f := newFixture(t)
	rev := f.publish(map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "1", 1), "b.yaml": cmB})
	cfg, ft := fault.Config(env.Config)
	ft.SetRules(
		fault.Rule{Verb: "patch", Resource: "configmaps", Times: 6, Status: http.StatusConflict},
		fault.Rule{Verb: "patch", Resource: "syncs", Subresource: "status", Times: 3, Status: http.StatusConflict},
	)
	f.startDaemon(cfg)
	f.createSync(2 * time.Second)
	f.waitSync("Ready despite the conflict storm", readyAt(rev))
	if ft.Injected() != 9 {
		t.Errorf("injected %d conflicts, want 9", ft.Injected())
	}
	for name, want := range map[string]string{"a": "1", "b": "v"} {
		cm, err := f.configMap(name)
		if err != nil || (cm.Data["version"] != want && cm.Data["k"] != want) {
			t.Errorf("configmap %s = %v, %v", name, cm.Data, err)
		}
	}
}

// TestS11StatusWriteForwardedThenDropped is S11 for the status write: the first status
// PATCHes land on the API server but the daemon sees an error (the response is dropped). The
// write is not aggregated with anything, so the apply stands; the daemon retries and the
// status ends describing the applied revision and generation (I5, I6), with no status write
// going back.
func TestS11StatusWriteForwardedThenDropped(t *testing.T) {
	f := newFixture(t)
	rev := f.publish(map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "1", 1)})
	cfg, ft := fault.Config(env.Config)
	ft.SetRules(fault.Rule{Verb: "patch", Resource: "syncs", Subresource: "status", Times: 3, DropResponse: true})
	f.startDaemon(cfg)
	f.createSync(2 * time.Second)
	s := f.waitSync("Ready although the first status writes lost their responses", readyAt(rev))
	// Fewer than 3 is fine: once a dropped write has landed, the next reconcile finds the
	// status already right and sends nothing.
	if ft.Injected() == 0 {
		t.Error("no status response was dropped: the scenario did not run")
	}
	if s.Status.ObservedGeneration != s.Generation {
		t.Errorf("observedGeneration %d, generation %d", s.Status.ObservedGeneration, s.Generation)
	}
	if cm, err := f.configMap("a"); err != nil || cm.Data["version"] != "1" {
		t.Errorf("configmap a = %v, %v", cm.Data, err)
	}
}

// widgetCRD and widget are a CRD and one of its resources.
const widgetCRD, widget = synctest.WidgetCRD, synctest.Widget
