package daemon

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// authRecorder is a reverse proxy in front of the fixture's git server that records the
// Authorization header of every request: what a git host of the Sync author's choosing
// would receive.
type authRecorder struct {
	URL  string
	mu   sync.Mutex
	seen []string // Authorization headers, "" for none
}

func (f *fixture) recordAuth() *authRecorder {
	f.t.Helper()
	target, err := url.Parse(f.git.URL)
	if err != nil {
		f.t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.t.Fatal(err)
	}
	a := &authRecorder{URL: "http://" + l.Addr().String()}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.seen = append(a.seen, r.Header.Get("Authorization"))
		a.mu.Unlock()
		proxy.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(l) }()
	f.t.Cleanup(func() { _ = srv.Close() })
	return a
}

// requests returns the Authorization headers seen so far.
func (a *authRecorder) requests() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.seen...)
}

// TestDaemonReadsGitSecretAsTheServiceAccount: under --default-service-account, the Secret
// a Sync names in spec.source.git.secretRef is read as that service account. While its Role
// does not allow reading Secrets, the Sync is Ready=False (FetchFailed) naming the Secret
// and the service account, nothing is fetched and the git host receives no credentials;
// once the Role allows it, the fetch works with them. Without it, the daemon read the Secret
// with its own rights: anyone who may create a Sync could have any Secret of the namespace
// sent to a git host of their choosing (the Sync went Ready, the host got "Basic ...").
func TestDaemonReadsGitSecretAsTheServiceAccount(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	rev := f.publish(map[string]string{"own.yaml": cmNamed("own", "NS")})
	f.deployer() // ConfigMaps only
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "someone-elses"},
		StringData: map[string]string{"username": "victim", "password": "do-not-send"}}
	if err := f.c.Create(ctx, sec); err != nil {
		t.Fatal(err)
	}
	host := f.recordAuth()
	f.startDaemon(env.Config, func(o *Options) { o.DefaultServiceAccount = "deployer" })
	f.createSync(time.Hour, func(s *v1alpha1.Sync) {
		s.Spec.Source.Git.URL = host.URL + "/app.git"
		s.Spec.Source.Git.SecretRef = &v1alpha1.LocalObjectReference{Name: sec.Name}
	})
	user := "system:serviceaccount:" + f.ns + ":deployer"
	s := f.waitSync("the Secret read refused to "+user, func(s *v1alpha1.Sync) bool {
		return meta.IsStatusConditionFalse(s.Status.Conditions, v1alpha1.ConditionReady) || s.Status.LastAttemptedRevision != ""
	})
	ready := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != reasonFetchFailed {
		t.Fatalf("Ready = %+v, want False %s (lastAttemptedRevision %q)", ready, reasonFetchFailed, s.Status.LastAttemptedRevision)
	}
	for _, want := range []string{f.ns + "/" + sec.Name, user, "forbidden"} {
		if !strings.Contains(ready.Message, want) {
			t.Errorf("the Ready=False message does not say %q: %s", want, ready.Message)
		}
	}
	if s.Status.LastAttemptedRevision != "" {
		t.Errorf("the Sync fetched revision %s without the right to read its Secret", s.Status.LastAttemptedRevision)
	}
	if _, err := f.configMap("own"); err == nil {
		t.Errorf("ConfigMap own was applied although the Secret read was refused")
	}
	for _, h := range host.requests() {
		if h != "" {
			t.Fatalf("the git host received credentials (%q) the service account may not read", h)
		}
	}

	// The Role allows reading Secrets now: the same Sync fetches with the Secret.
	role := &rbacv1.Role{}
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "deployer"}, role); err != nil {
		t.Fatal(err)
	}
	role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}})
	if err := f.c.Update(ctx, role); err != nil {
		t.Fatal(err)
	}
	// RBAC is enforced from an informer: wait until the grant is seen, so the reconcile asked
	// for below does not race it (a refused one retries only after 30s).
	asDeployer := rest.CopyConfig(env.Config)
	asDeployer.Impersonate = rest.ImpersonationConfig{UserName: user}
	dc, err := client.New(asDeployer, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return dc.Get(ctx, client.ObjectKeyFromObject(sec), &corev1.Secret{}) == nil, nil
	})
	if err != nil {
		t.Fatalf("the grant to read Secrets never took effect for %s: %v", user, err)
	}
	f.updateSync("app", func(s *v1alpha1.Sync) {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations[v1alpha1.RequestedAtAnnotation] = "secrets-granted"
	})
	f.waitSync("Ready with the Secret read as "+user, readyAt(rev))
	sent := false
	for _, h := range host.requests() {
		sent = sent || strings.HasPrefix(h, "Basic ")
	}
	if !sent {
		t.Errorf("the fetch did not use the Secret's credentials: %q", host.requests())
	}
}
