package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// varsCM is a ConfigMap of the source whose data holds ${...} references.
func varsCM(name, data string) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: " + name + ", namespace: NS}\ndata:\n" + data
}

func (f *fixture) createObject(o client.Object) {
	f.t.Helper()
	o.SetNamespace(f.ns)
	if err := f.c.Create(context.Background(), o); err != nil {
		f.t.Fatal(err)
	}
}

func withPostBuild(pb v1alpha1.PostBuild) func(*v1alpha1.Sync) {
	return func(s *v1alpha1.Sync) { s.Spec.PostBuild = &pb }
}

// failedWith waits for Ready=False with reason and returns the condition.
func (f *fixture) failedWith(reason string) *metav1.Condition {
	f.t.Helper()
	s := f.waitSync("Ready=False "+reason, func(s *v1alpha1.Sync) bool {
		c := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
		return s.Status.ObservedGeneration == s.Generation && c != nil && c.Status == metav1.ConditionFalse && c.Reason == reason
	})
	return meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
}

// TestDaemonSubstitutes: variables of a ConfigMap, then a Secret, then spec.postBuild.substitute
// (later wins), a default, and an optional missing ConfigMap (skipped) land in the applied
// object; an object with Flux's opt-out annotation keeps its text.
func TestDaemonSubstitutes(t *testing.T) {
	f := newFixture(t)
	f.createObject(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "vars"},
		Data: map[string]string{"from_cm": "cm", "over_secret": "cm", "over_inline": "cm"}})
	f.createObject(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "secret-vars"},
		StringData: map[string]string{"from_secret": "secret", "over_secret": "secret", "over_inline": "secret"}})
	rev := f.publish(map[string]string{
		"app.yaml": varsCM("out", "  cm: ${from_cm}\n  secret: ${over_secret}\n  inline: ${over_inline}\n  both: ${from_secret}\n  default: ${unset:=fallback}\n  escaped: $${from_cm}\n"),
		"off.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: skipped\n  namespace: NS\n  annotations: {kustomize.toolkit.fluxcd.io/substitute: disabled}\ndata: {k: '${from_cm}'}\n",
	})
	f.startDaemon(env.Config)
	f.createSync(0, withPostBuild(v1alpha1.PostBuild{
		Substitute: map[string]string{"over_inline": "inline"},
		SubstituteFrom: []v1alpha1.SubstituteReference{
			{Kind: "ConfigMap", Name: "vars"},
			{Kind: "ConfigMap", Name: "not-there", Optional: true},
			{Kind: "Secret", Name: "secret-vars"},
		},
	}))
	f.waitSync("Ready with substituted objects", readyAt(rev))
	cm, err := f.configMap("out")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"cm": "cm", "secret": "secret", "inline": "inline", "both": "secret", "default": "fallback", "escaped": "${from_cm}"}
	for k, v := range want {
		if cm.Data[k] != v {
			t.Errorf("data.%s = %q, want %q (all: %v)", k, cm.Data[k], v, cm.Data)
		}
	}
	if skipped, err := f.configMap("skipped"); err != nil || skipped.Data["k"] != "${from_cm}" {
		t.Errorf("the disabled object was substituted: %v, %v", skipped.Data, err)
	}
}

// TestDaemonSubstituteFromMissing: a required ConfigMap that does not exist makes the Sync
// Ready=False BuildFailed naming it, and nothing is applied; once it exists the Sync applies.
func TestDaemonSubstituteFromMissing(t *testing.T) {
	f := newFixture(t)
	rev := f.publish(map[string]string{"app.yaml": varsCM("out", "  k: ${region}\n")})
	f.startDaemon(env.Config)
	f.createSync(0, withPostBuild(v1alpha1.PostBuild{SubstituteFrom: []v1alpha1.SubstituteReference{{Kind: "ConfigMap", Name: "cluster-vars"}}}))
	c := f.failedWith(reasonBuildFailed)
	for _, w := range []string{"spec.postBuild.substituteFrom[0]: ConfigMap " + f.ns + "/cluster-vars", "not found"} {
		if !strings.Contains(c.Message, w) {
			t.Errorf("message %q does not say %q", c.Message, w)
		}
	}
	if _, err := f.configMap("out"); err == nil {
		t.Error("ConfigMap out was applied although a required substituteFrom object is missing")
	}
	f.createObject(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cluster-vars"}, Data: map[string]string{"region": "eu-1"}})
	f.requestReconcile("app")
	f.waitSync("Ready once the ConfigMap exists", readyAt(rev))
	if cm, err := f.configMap("out"); err != nil || cm.Data["k"] != "eu-1" {
		t.Errorf("out = %v, %v", cm.Data, err)
	}
}

// TestDaemonSubstituteStrictKeepsState: under strict, a new revision that uses a variable
// without value or default, and drops another object, fails naming the object, its file
// and the variable; nothing of it is applied and nothing is pruned (I8).
func TestDaemonSubstituteStrictKeepsState(t *testing.T) {
	f := newFixture(t)
	rev := f.publish(map[string]string{"app.yaml": varsCM("out", "  k: ${known}\n"), "keep.yaml": cmNamed("keep", "NS")})
	f.startDaemon(env.Config)
	f.createSync(0, withPostBuild(v1alpha1.PostBuild{Strict: true, Substitute: map[string]string{"known": "v1"}}))
	f.waitSync("Ready at the first revision", readyAt(rev))

	f.publish(map[string]string{"app.yaml": varsCM("out", "  k: ${known}-${forgotten}\n"), "keep.yaml": ""})
	f.requestReconcile("app")
	c := f.failedWith(reasonBuildFailed)
	for _, w := range []string{"app.yaml:1: ConfigMap " + f.ns + "/out", `variable "forgotten" has no value and no default`} {
		if !strings.Contains(c.Message, w) {
			t.Errorf("message %q does not say %q", c.Message, w)
		}
	}
	if _, err := f.configMap("keep"); err != nil {
		t.Errorf("ConfigMap keep was pruned by a revision that failed substitution: %v", err)
	}
	if cm, err := f.configMap("out"); err != nil || cm.Data["k"] != "v1" {
		t.Errorf("out changed by a failed revision: %v, %v", cm.Data, err)
	}
}

// TestDaemonSubstituteFromAsTheServiceAccount: a Sync acting as a service account that may
// not read Secrets cannot have the daemon read one for it by naming it in substituteFrom
// (I13): Ready=False naming the Secret, the identity and the refusal, nothing applied.
func TestDaemonSubstituteFromAsTheServiceAccount(t *testing.T) {
	f := newFixture(t)
	f.deployer() // ConfigMaps only
	f.createObject(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "admin-token"}, StringData: map[string]string{"token": "not-yours"}})
	f.publish(map[string]string{"app.yaml": varsCM("out", "  k: ${token}\n")})
	f.startDaemon(env.Config)
	f.createSync(0, func(s *v1alpha1.Sync) { s.Spec.ServiceAccountName = "deployer" },
		withPostBuild(v1alpha1.PostBuild{SubstituteFrom: []v1alpha1.SubstituteReference{{Kind: "Secret", Name: "admin-token"}}}))
	c := f.failedWith(reasonBuildFailed)
	for _, w := range []string{"Secret " + f.ns + "/admin-token read as system:serviceaccount:" + f.ns + ":deployer", "forbidden"} {
		if !strings.Contains(c.Message, w) {
			t.Errorf("message %q does not say %q", c.Message, w)
		}
	}
	if _, err := f.configMap("out"); err == nil {
		t.Error("ConfigMap out was applied with a Secret the service account may not read")
	}
}

// plantedValue is a unique value that is not a valid label value (the "!").
func plantedValue(t *testing.T) string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "planted-" + hex.EncodeToString(b) + "!"
}

// TestDaemonSecretValuesNeverWritten plants a Secret value that flows into a ConfigMap
// (applied) and into a label value the API server refuses, quoting it in its error. The
// status, the Sync's events and the daemon's logs show the error with the value redacted,
// never the value. Before redaction the Ready message and the Warning event carried it.
func TestDaemonSecretValuesNeverWritten(t *testing.T) {
	logs := captureLogs(t)
	f := newFixture(t)
	planted := plantedValue(t)
	f.createObject(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db"}, StringData: map[string]string{"db_password": planted}})
	f.publish(map[string]string{
		"app.yaml": varsCM("uses-secret", "  password: ${db_password}\n"),
		"bad.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bad\n  namespace: NS\n  labels: {pw: '${db_password}'}\n",
	})
	f.startDaemon(env.Config)
	f.createSync(0, withPostBuild(v1alpha1.PostBuild{SubstituteFrom: []v1alpha1.SubstituteReference{{Kind: "Secret", Name: "db"}}}))
	c := f.failedWith(reasonApplyFailed)
	if !strings.Contains(c.Message, "ConfigMap "+f.ns+"/bad") || !strings.Contains(c.Message, `"***"`) {
		t.Errorf("the message should name the refused object and show the value redacted: %s", c.Message)
	}
	if cm, err := f.configMap("uses-secret"); err == nil && cm.Data["password"] != planted {
		t.Errorf("the value did not flow into the object: %v", cm.Data)
	}

	s := &v1alpha1.Sync{}
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "app"}, s); err != nil {
		t.Fatal(err)
	}
	status, _ := json.Marshal(s.Status)
	events := &corev1.EventList{}
	if err := f.c.List(context.Background(), events, client.InNamespace(f.ns)); err != nil {
		t.Fatal(err)
	}
	var evText strings.Builder
	warned := false
	for _, e := range events.Items {
		if e.InvolvedObject.Kind == "Sync" {
			evText.WriteString(e.Reason + " " + e.Message + "\n")
			warned = warned || e.Type == corev1.EventTypeWarning
		}
	}
	if !warned {
		t.Error("no Warning event about the Sync: the test would not see a leak there")
	}
	klog.Flush()
	for channel, text := range map[string]string{"status": string(status), "events": evText.String(), "logs": logs.String()} {
		if strings.Contains(text, planted) {
			t.Errorf("the Secret value appears in the %s:\n%s", channel, text)
		}
	}
	if !strings.Contains(logs.String(), "reconciled") {
		t.Error("no daemon log was captured: the test would not see a leak there")
	}
}

// noOpCounter counts a daemon's reconciles (at AfterRender) and its API requests, to take the
// requests of whole reconciles once a Sync is converged.
type noOpCounter struct {
	reconciles atomic.Int64
	counter    requestCounter
}

// config is env.Config with the counting transport.
func (n *noOpCounter) config() *rest.Config {
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(n.counter.wrap)
	return cfg
}

// options is the daemon option that counts reconciles.
func (n *noOpCounter) options(o *Options) {
	o.test.crash.AfterRender = func(*v1alpha1.Sync) error { n.reconciles.Add(1); return nil }
}

// requests waits for two reconciles that started after the call (the first after the Ready
// status was written, so settled), then returns the requests of the next k: from one
// reconcile's AfterRender to the k-th next.
func (n *noOpCounter) requests(t *testing.T, k int64) (all, writes []string) {
	t.Helper()
	waitFor := func(want int64) {
		t.Helper()
		err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return n.reconciles.Load() >= want, nil
		})
		if err != nil {
			t.Fatalf("no reconcile %d ran", want)
		}
	}
	waitFor(n.reconciles.Load() + 2)
	start, w := n.reconciles.Load(), n.counter.len()
	waitFor(start + k)
	return n.counter.since(w)
}

// requestCounter records the API requests a rest config sends.
type requestCounter struct {
	mu       sync.Mutex
	requests []string // "METHOD path"
}

func (c *requestCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		c.mu.Lock()
		c.requests = append(c.requests, r.Method+" "+r.URL.Path)
		c.mu.Unlock()
		return rt.RoundTrip(r)
	})
}

// since returns the requests after the first n, and the writes (not GET) among them.
func (c *requestCounter) since(n int) (all, writes []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	all = append([]string(nil), c.requests[n:]...)
	for _, r := range all {
		if !strings.HasPrefix(r, http.MethodGet+" ") {
			writes = append(writes, r)
		}
	}
	return all, writes
}

func (c *requestCounter) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.requests)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestDaemonSubstituteNoOpWritesNothing is I7 with a substitution in place: once converged,
// reconciles that read the same ConfigMap and Secret and substitute the same values (into
// new copies of the objects each time) send no write at all, as without substitution, and
// stay within the no-op budget of docs/benchmarks.md (≤ 10 requests; the two substituteFrom
// reads are two of them: they go to the API server as the Sync's identity, uncached).
func TestDaemonSubstituteNoOpWritesNothing(t *testing.T) {
	f := newFixture(t)
	f.createObject(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "vars"}, Data: map[string]string{"env": "prod", "replicas": "3"}})
	f.createObject(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "secret-vars"}, StringData: map[string]string{"pw": "s3cr3t-pw"}})
	files := map[string]string{}
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		files[n+".yaml"] = varsCM(n, "  env: ${env}\n  pw: ${pw}\n  region: ${region:=eu-1}\n")
	}
	rev := f.publish(files)
	n := &noOpCounter{}
	f.startDaemon(n.config(), n.options)
	f.createSync(2*time.Second, withPostBuild(v1alpha1.PostBuild{Strict: true,
		SubstituteFrom: []v1alpha1.SubstituteReference{{Kind: "ConfigMap", Name: "vars"}, {Kind: "Secret", Name: "secret-vars"}}}))
	f.waitSync("Ready with substituted objects", readyAt(rev))
	if cm, err := f.configMap("c"); err != nil || cm.Data["pw"] != "s3cr3t-pw" || cm.Data["region"] != "eu-1" {
		t.Fatalf("c = %v, %v", cm.Data, err)
	}
	all, writes := n.requests(t, 3)
	if len(writes) > 0 {
		t.Errorf("I7: no-op reconciles with a substitution sent writes: %v", writes)
	}
	t.Logf("3 no-op reconciles with 2 substituteFrom reads: %d requests: %v", len(all), all)
	if len(all) > 3*10 {
		t.Errorf("no-op reconciles cost %d requests for 3 (budget 10 each): %v", len(all), all)
	}
}

// TestDaemonSecretValueWithTrailingNewline: a Secret value stored with a trailing newline
// (kubectl create secret --from-file) is substituted without it, and redacted in that form
// from the status and the logs. Were only the stored form redacted, the value would show in
// the Ready message, the event and its log line.
func TestDaemonSecretValueWithTrailingNewline(t *testing.T) {
	logs := captureLogs(t)
	f := newFixture(t)
	planted := plantedValue(t)
	f.createObject(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db"}, StringData: map[string]string{"db_password": planted + "\n"}})
	f.publish(map[string]string{
		"bad.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bad\n  namespace: NS\n  labels: {pw: '${db_password}'}\n",
	})
	f.startDaemon(env.Config)
	f.createSync(0, withPostBuild(v1alpha1.PostBuild{SubstituteFrom: []v1alpha1.SubstituteReference{{Kind: "Secret", Name: "db"}}}))
	c := f.failedWith(reasonApplyFailed)
	if strings.Contains(c.Message, planted) {
		t.Errorf("the Secret value appears in the Ready message: %s", c.Message)
	}
	klog.Flush()
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, planted) {
			t.Errorf("the Secret value appears in the logs: %.300s", l)
		}
	}
}

// TestDaemonKeptSubstitutionFollowsTheSpec: the objects a Sync's substitution memo keeps
// between reconciles are never changed by an apply. Applied under spec.targetNamespace, then
// with it removed, the substituted object goes to the Sync's namespace like the plain one:
// had the engine set the kept object's namespace in place, the memo would hand the old
// target back.
func TestDaemonKeptSubstitutionFollowsTheSpec(t *testing.T) {
	f := newFixture(t)
	target := f.ns + "-target"
	ctx := context.Background()
	if err := f.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: target}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.c.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: target}})
	})
	rev := f.publish(map[string]string{
		"app.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: substituted}\ndata: {tier: '${tier}'}\n---\n" +
			"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: plain}\ndata: {a: b}\n",
	})
	f.startDaemon(env.Config)
	f.createSync(0, withPostBuild(v1alpha1.PostBuild{Substitute: map[string]string{"tier": "gold"}}),
		func(s *v1alpha1.Sync) { s.Spec.TargetNamespace = target })
	f.waitSync("Ready in the target namespace", readyAt(rev))
	for _, name := range []string{"substituted", "plain"} {
		cm := &corev1.ConfigMap{}
		if err := f.c.Get(ctx, client.ObjectKey{Namespace: target, Name: name}, cm); err != nil {
			t.Fatalf("ConfigMap %s/%s: %v", target, name, err)
		}
	}
	f.updateSync("app", func(s *v1alpha1.Sync) { s.Spec.TargetNamespace = "" })
	f.waitSync("Ready without a target namespace", readyAt(rev))
	for _, name := range []string{"substituted", "plain"} {
		cm, err := f.configMap(name)
		if err != nil {
			t.Errorf("ConfigMap %s not in the Sync's namespace %s once spec.targetNamespace is removed: %v", name, f.ns, err)
			continue
		}
		if name == "substituted" && cm.Data["tier"] != "gold" {
			t.Errorf("ConfigMap substituted: data %v, want tier gold", cm.Data)
		}
	}
}
