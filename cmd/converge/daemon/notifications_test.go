package daemon

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/cmd/converge/daemon/notify"
	"github.com/converge-dev/converge/cmd/converge/internal/synctest"
	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/status/v1alpha1"
)

const notifyKey = "hmac-key-of-the-test"

// notified is one request a test receiver accepted, its signature checked.
type notified struct {
	Transition string `json:"transition"`
	Revision   string `json:"revision"`
	Reason     string `json:"reason"`
	Message    string `json:"message"`
	Cluster    string `json:"cluster"`
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
}

// hmacReceiver is a generic-hmac receiver: it fails the test on a request with a wrong
// method, path, content type or signature, and passes each accepted event on.
func hmacReceiver(t *testing.T) (url string, got <-chan notified) {
	ch := make(chan notified, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mac := hmac.New(sha256.New, []byte(notifyKey))
		mac.Write(body)
		want := "sha256=" + hex.EncodeToString(mac.Sum(nil))
		if r.Method != http.MethodPost || r.URL.Path != "/hook" || r.Header.Get("Content-Type") != "application/json" ||
			!hmac.Equal([]byte(r.Header.Get("X-Signature")), []byte(want)) {
			t.Errorf("bad request %s %s %v: signature %q, want %q", r.Method, r.URL.Path, r.Header, r.Header.Get("X-Signature"), want)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var n notified
		if err := json.Unmarshal(body, &n); err != nil {
			t.Errorf("body %s: %v", body, err)
		}
		ch <- n
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/hook", ch
}

// notifyingDaemon starts the daemon with local receivers allowed, fast retries, /metrics on
// addr, and a Sync notifying address through a generic-hmac provider whose key is in a
// Secret.
func (f *fixture) notifyingDaemon(address string, cfg *rest.Config, options ...func(*Options)) (metricsAddr string) {
	f.t.Helper()
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "hook"}, Data: map[string][]byte{"token": []byte(notifyKey)}}
	if err := f.c.Create(context.Background(), sec); err != nil {
		f.t.Fatal(err)
	}
	metricsAddr = cluster.FreeAddr()
	f.startDaemon(cfg, append([]func(*Options){func(o *Options) {
		o.MetricsAddr = metricsAddr
		o.ClusterName = "test-cluster"
		o.test.notify = notify.Options{AllowLocal: true, MaxAttempts: 2, InitialBackoff: 10 * time.Millisecond, AttemptTimeout: 5 * time.Second}
	}}, options...)...)
	f.createSync(2*time.Second, func(s *v1alpha1.Sync) {
		s.Spec.Notifications = []v1alpha1.Notification{{Type: "generic-hmac", Address: address,
			SecretRef: &v1alpha1.LocalObjectReference{Name: "hook"}}}
	})
	return metricsAddr
}

// scrape is the sum of the samples of metric in the fixture's namespace whose labels hold
// every one of labels (`result="failed"`).
func (f *fixture) scrape(addr, metric string, labels ...string) float64 {
	f.t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, metric+"{") || !strings.Contains(line, fmt.Sprintf(`namespace=%q`, f.ns)) {
			continue
		}
		matched := true
		for _, l := range labels {
			matched = matched && strings.Contains(line, l)
		}
		if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); matched && err == nil {
			sum += v
		}
	}
	return sum
}

// waitMetric polls until metric (with labels) reaches at least want.
func (f *fixture) waitMetric(addr, metric string, want float64, labels ...string) {
	f.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		return f.scrape(addr, metric, labels...) >= want, nil
	})
	if err != nil {
		f.t.Fatalf("%s%v never reached %v: %v (last %v)", metric, labels, want, err, f.scrape(addr, metric, labels...))
	}
}

func receive(t *testing.T, ch <-chan notified, what string) notified {
	t.Helper()
	select {
	case n := <-ch:
		return n
	case <-time.After(60 * time.Second):
		t.Fatalf("no notification: want %s", what)
		return notified{}
	}
}

// TestNotificationsOnTransitionsOnly: a Sync becoming Ready sends one signed BecameReady,
// its no-op reconciles send nothing, a broken commit sends one Failed.
func TestNotificationsOnTransitionsOnly(t *testing.T) {
	f := newFixture(t)
	rev1 := f.publish(map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "1", 1)})
	url, got := hmacReceiver(t)
	addr := f.notifyingDaemon(url, env.Config)
	f.waitSync("Ready at the first commit", readyAt(rev1))

	n := receive(t, got, "BecameReady")
	if n.Transition != "BecameReady" || n.Revision != rev1 || n.Cluster != "test-cluster" || n.Namespace != f.ns || n.Name != "app" {
		t.Errorf("first notification %+v, want BecameReady of %s/app at %s from test-cluster", n, f.ns, rev1)
	}
	f.waitMetric(addr, "converge_notifications_total", 1, `provider="generic-hmac"`, `result="delivered"`)

	// Three more successful reconciles at the same revision (interval 2 s): nothing sent.
	done := f.scrape(addr, "converge_reconciles_total", `result="success"`)
	f.waitMetric(addr, "converge_reconciles_total", done+3, `result="success"`)
	select {
	case n := <-got:
		t.Errorf("a no-op reconcile sent %+v", n)
	default:
	}

	rev2 := f.publish(map[string]string{"a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: [not, a, map\n"})
	f.waitSync("Ready=False on the broken commit", func(s *v1alpha1.Sync) bool {
		return s.Status.LastAttemptedRevision == rev2 && meta.IsStatusConditionFalse(s.Status.Conditions, v1alpha1.ConditionReady)
	})
	n = receive(t, got, "Failed")
	if n.Transition != "Failed" || n.Revision != rev2 || n.Reason != reasonBuildFailed {
		t.Errorf("notification %+v, want Failed of %s with reason %s", n, rev2, reasonBuildFailed)
	}
	failed := f.scrape(addr, "converge_reconciles_total")
	f.waitMetric(addr, "converge_reconciles_total", failed+2)
	select {
	case n := <-got:
		t.Errorf("a retry of the same failure sent %+v", n)
	default:
	}
}

// TestNotificationReceiverDown: a receiver that is not there fails the delivery after its
// retries: counted as failed, a Warning NotificationFailed on the Sync, which stays Ready.
func TestNotificationReceiverDown(t *testing.T) {
	f := newFixture(t)
	rev1 := f.publish(map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "1", 1)})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "http://" + ln.Addr().String() + "/hook"
	ln.Close()
	addr := f.notifyingDaemon(gone, env.Config)
	f.waitSync("Ready at the first commit", readyAt(rev1))
	f.waitMetric(addr, "converge_notifications_total", 1, `provider="generic-hmac"`, `result="failed"`)
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return strings.Contains(f.syncEvents(), "Warning NotificationFailed BecameReady"), nil
	})
	if err != nil {
		t.Errorf("no NotificationFailed event: %v; events:\n%s", err, f.syncEvents())
	}
	if ev := f.syncEvents(); strings.Contains(ev, "/hook") {
		t.Errorf("an event shows the receiver's path: %s", ev)
	}
	f.waitSync("still Ready", readyAt(rev1))
}

// TestNotificationSecretReadAsTheSyncIdentity: a Sync acting as a service account that may
// not read Secrets gets no notification sent with the daemon's rights: the delivery fails
// (metric, event naming the identity), nothing reaches the receiver, the Sync stays Ready.
func TestNotificationSecretReadAsTheSyncIdentity(t *testing.T) {
	f := newFixture(t)
	f.deployer() // ConfigMaps only
	rev1 := f.publish(map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "1", 1)})
	url, got := hmacReceiver(t)
	addr := f.notifyingDaemon(url, env.Config, func(o *Options) { o.DefaultServiceAccount = "deployer" })
	f.waitSync("Ready at the first commit", readyAt(rev1))
	f.waitMetric(addr, "converge_notifications_total", 1, `provider="generic-hmac"`, `result="failed"`)
	user := "system:serviceaccount:" + f.ns + ":deployer"
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		ev := f.syncEvents()
		return strings.Contains(ev, "NotificationFailed") && strings.Contains(ev, "read as "+user) && strings.Contains(ev, "forbidden"), nil
	})
	if err != nil {
		t.Errorf("no NotificationFailed event naming %s: events:\n%s", user, f.syncEvents())
	}
	select {
	case n := <-got:
		t.Errorf("the receiver got %+v signed with a Secret %s may not read", n, user)
	default:
	}
}

// TestNotificationsNoOpReadsNoSecret: once a notifying Sync has sent its BecameReady, its
// no-op reconciles read no notification Secret and write nothing.
func TestNotificationsNoOpReadsNoSecret(t *testing.T) {
	f := newFixture(t)
	rev1 := f.publish(map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "1", 1)})
	url, got := hmacReceiver(t)
	n := &noOpCounter{}
	f.notifyingDaemon(url, n.config(), n.options)
	f.waitSync("Ready at the first commit", readyAt(rev1))
	receive(t, got, "BecameReady")
	all, writes := n.requests(t, 3)
	for _, r := range all {
		if strings.Contains(r, "/secrets/hook") {
			t.Errorf("a no-op reconcile read the notification Secret: %v", all)
			break
		}
	}
	if len(writes) > 0 {
		t.Errorf("no-op reconciles of a notifying Sync sent writes: %v", writes)
	}
}

// TestNotificationsCRDRefusesUnknownType: the API server refuses a provider type the
// daemon cannot send to, and more than 8 notifications.
func TestNotificationsCRDRefusesUnknownType(t *testing.T) {
	f := newFixture(t)
	f.startDaemon(env.Config) // installs the CRD
	for name, n := range map[string][]v1alpha1.Notification{
		"bad-type": {{Type: "pagerduty", Address: "https://example.com/"}},
		"too-many": make([]v1alpha1.Notification, 9),
	} {
		for i := range n {
			if n[i].Type == "" {
				n[i].Type = "generic"
			}
		}
		s := synctest.NewSync(f.ns, f.git.RepoURL("app"), time.Minute, func(s *v1alpha1.Sync) {
			s.Name, s.Spec.Notifications = name, n
		})
		err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			err := f.c.Create(ctx, s)
			return err != nil && strings.Contains(err.Error(), "spec.notifications"), nil
		})
		if err != nil {
			t.Errorf("%s: created, want refused naming spec.notifications", name)
		}
	}
}

// TestAPIServerPrefixes: the API server's address is denied to receivers, except a loopback
// one when local receivers are allowed (the guard refuses loopback otherwise).
func TestAPIServerPrefixes(t *testing.T) {
	for _, tt := range []struct {
		host       string
		allowLocal bool
		want       string
	}{
		{"https://10.96.0.1:443", false, "[10.96.0.1/32]"},
		{"https://[fd00::1]:6443", true, "[fd00::1/128]"},
		{"https://127.0.0.1:6443", false, "[127.0.0.1/32]"},
		{"https://127.0.0.1:6443", true, "[]"},
		{"", false, "[]"},
	} {
		if got := fmt.Sprint(apiServerPrefixes(context.Background(), tt.host, tt.allowLocal)); got != tt.want {
			t.Errorf("apiServerPrefixes(%q, %v) = %s, want %s", tt.host, tt.allowLocal, got, tt.want)
		}
	}
}

// heldSecret is a transport that holds every read of one Secret until released, whatever
// its context says: a read that hangs.
type heldSecret struct {
	path     string
	released chan struct{}
	once     sync.Once
}

func (h *heldSecret) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, h.path) {
			<-h.released
		}
		return rt.RoundTrip(req)
	})
}

func (h *heldSecret) release() { h.once.Do(func() { close(h.released) }) }

// TestNotificationSecretReadHoldsNoReconcileWorker is I15: with one worker, a notification
// Secret whose read hangs holds a delivery worker, not the reconcile's: a Sync of another
// namespace is applied meanwhile, and the notification is sent once the read returns.
func TestNotificationSecretReadHoldsNoReconcileWorker(t *testing.T) {
	f := newFixture(t)
	other := env.Namespace(t)
	rev := f.publish(map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "1", 1), "other/cm.yaml": noNamespace})
	url, got := hmacReceiver(t)
	held := &heldSecret{path: "/namespaces/" + f.ns + "/secrets/hook", released: make(chan struct{})}
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(held.wrap)
	f.notifyingDaemon(url, cfg, func(o *Options) { o.Concurrency = 1; o.test.alsoWatch = []string{other} })
	t.Cleanup(held.release) // before the daemon stops: it waits for its delivery workers
	f.waitSync("Ready at the first commit", readyAt(rev))

	synctest.Create(t, f.c, synctest.NewSync(other, f.git.RepoURL("app"), time.Hour, func(s *v1alpha1.Sync) { s.Spec.Path = "other" }))
	synctest.Wait(t, f.c, client.ObjectKey{Namespace: other, Name: "app"}, "Ready while a notification Secret read hangs", readyAt(rev))
	select {
	case n := <-got:
		t.Errorf("%+v sent before its Secret was read", n)
	default:
	}
	held.release()
	if n := receive(t, got, "BecameReady"); n.Transition != "BecameReady" || n.Revision != rev {
		t.Errorf("notification %+v, want BecameReady at %s", n, rev)
	}
}

// TestNotificationOfADeletedSyncLeavesNoSeries: a delivery that ends after its Sync was
// deleted counts nothing: the Sync's notification series, dropped with it, stay gone.
func TestNotificationOfADeletedSyncLeavesNoSeries(t *testing.T) {
	f := newFixture(t)
	rev := f.publish(map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "1", 1)})
	answer, asked := make(chan struct{}), make(chan struct{}, 1)
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { asked <- struct{}{} })
		<-answer
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	var release sync.Once
	addr := f.notifyingDaemon(srv.URL+"/hook", env.Config)
	t.Cleanup(func() { release.Do(func() { close(answer) }) }) // before the daemon stops
	f.waitSync("Ready at the first commit", readyAt(rev))
	select {
	case <-asked:
	case <-time.After(time.Minute):
		t.Fatal("the receiver was never asked")
	}
	f.deleteSync("app", time.Minute)
	release.Do(func() { close(answer) })
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return f.scrape(addr, "converge_notifications_total") > 0, nil
	})
	if err == nil {
		t.Errorf("the deleted Sync's notification series came back: %v delivered", f.scrape(addr, "converge_notifications_total"))
	}
}
