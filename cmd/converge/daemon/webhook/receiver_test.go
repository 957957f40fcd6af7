package webhook

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/cmd/converge/internal/scheme"
	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// hookFixture is a webhook receiver served against the real API server, in a namespace of
// its own, with Syncs that are suspended (nothing reconciles them: the test reads the
// requestedAt annotation).
type hookFixture struct {
	t   *testing.T
	ns  string
	c   client.Client
	url string
}

// newHookFixture serves a webhook with opts; mutate runs before it serves.
func newHookFixture(t *testing.T, opts Options, mutate ...func(*Receiver)) *hookFixture {
	t.Helper()
	cluster.Require(t, env)
	c, err := client.New(env.Config, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	installSyncCRD(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	addr := cluster.FreeAddr()
	hook, err := New(Config{Addr: addr, Syncs: c, Client: c, REST: env.Config, User: actsAs(""), Log: logr.Discard(), Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	srv := hook.Runnable()
	for _, m := range mutate {
		m(hook)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	ns := env.Namespace(t)
	return &hookFixture{t: t, ns: ns, c: c, url: "http://" + addr + "/hooks/" + ns + "/"}
}

// sync creates a suspended Sync, with a webhook Secret holding token unless token is empty;
// mutate runs before it is created.
func (h *hookFixture) sync(name, token string, mutate ...func(*v1alpha1.Sync)) {
	h.t.Helper()
	ctx := context.Background()
	s := &v1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns}, Spec: v1alpha1.SyncSpec{
		Source:   v1alpha1.Source{Git: &v1alpha1.GitSource{URL: "https://git.example.invalid/app.git"}},
		Interval: metav1.Duration{Duration: time.Hour}, Suspend: true}}
	if token != "" {
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-webhook", Namespace: h.ns},
			StringData: map[string]string{TokenKey: token + "\n"}}
		if err := h.c.Create(ctx, sec); err != nil {
			h.t.Fatal(err)
		}
		s.Spec.Webhook = &v1alpha1.Webhook{SecretRef: v1alpha1.LocalObjectReference{Name: sec.Name}}
	}
	for _, m := range mutate {
		m(s)
	}
	if err := h.c.Create(ctx, s); err != nil {
		h.t.Fatal(err)
	}
}

// post sends body to /hooks/<ns>/<name> with headers, retrying until the server listens.
func (h *hookFixture) post(name string, body []byte, headers map[string]string) (int, string) {
	h.t.Helper()
	return h.postWith(name, body, headers, nil)
}

// postWith is post, calling seen (when not nil) with the answer.
func (h *hookFixture) postWith(name string, body []byte, headers map[string]string, seen func(*http.Response)) (int, string) {
	h.t.Helper()
	var code int
	var text []byte
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url+name, bytes.NewReader(body))
		if err != nil {
			return false, err
		}
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		defer func() { _ = resp.Body.Close() }()
		if seen != nil {
			seen(resp)
		}
		code = resp.StatusCode
		text, err = io.ReadAll(resp.Body)
		return err == nil, nil
	})
	if err != nil {
		h.t.Fatalf("POST %s: webhook unreachable: %v", name, err)
	}
	return code, string(text)
}

func (h *hookFixture) requestedAt(name string) string {
	h.t.Helper()
	s := &v1alpha1.Sync{}
	if err := h.c.Get(context.Background(), client.ObjectKey{Namespace: h.ns, Name: name}, s); err != nil {
		h.t.Fatal(err)
	}
	return s.Annotations[v1alpha1.RequestedAtAnnotation]
}

func github(secret string, body []byte, delivery string) map[string]string {
	h := map[string]string{"X-Hub-Signature-256": "sha256=" + sign([]byte(secret), body)}
	if delivery != "" {
		h["X-GitHub-Delivery"] = delivery
	}
	return h
}

// TestWebhookSecretPerSync is I13: Sync a is signed by secret a, Sync b by secret b; a
// request for b signed with a is refused (with one --webhook-secret-file for every Sync it
// was accepted), and a missing Sync, a Sync without a secret and a wrong signature or token
// all get the same answer.
func TestWebhookSecretPerSync(t *testing.T) {
	h := newHookFixture(t, DefaultOptions())
	h.sync("a", "secret-a")
	h.sync("b", "secret-b")
	h.sync("nosecret", "")
	body := []byte(`{"ref":"refs/heads/main"}`)

	type answer struct {
		code int
		text string
	}
	refused := answer{http.StatusUnauthorized, "unauthorized\n"}
	for _, tc := range []struct {
		name, sync string
		headers    map[string]string
		want       answer
	}{
		{"b signed with a's secret", "b", github("secret-a", body, "1"), refused},
		{"b with a's gitlab token", "b", map[string]string{"X-Gitlab-Token": "secret-a"}, refused},
		{"unknown Sync", "missing", github("secret-a", body, "2"), refused},
		{"Sync without a webhook secret", "nosecret", github("", body, "4"), refused},
		{"Sync without a webhook secret, empty token", "nosecret", map[string]string{"X-Gitlab-Token": "x"}, refused},
		{"wrong signature", "a", github("wrong", body, "5"), refused},
		{"unsigned", "a", nil, refused},
		{"a signed with its own secret", "a", github("secret-a", body, "6"), answer{http.StatusAccepted, ""}},
		{"b with its own gitlab token", "b", map[string]string{"X-Gitlab-Token": "secret-b"}, answer{http.StatusAccepted, ""}},
	} {
		code, text := h.post(tc.sync, body, tc.headers)
		if got := (answer{code, text}); got != tc.want {
			t.Errorf("%s: answer %d %q, want %d %q", tc.name, got.code, got.text, tc.want.code, tc.want.text)
		}
	}
	if h.requestedAt("a") == "" || h.requestedAt("b") == "" {
		t.Errorf("requestedAt a %q, b %q: want both set by their own secret", h.requestedAt("a"), h.requestedAt("b"))
	}
	if got := h.requestedAt("nosecret"); got != "" {
		t.Errorf("a Sync without a webhook secret was triggered: requestedAt %q", got)
	}
}

// countingSecrets counts the reads of a real client.
type countingSecrets struct {
	secretGetter
	gets atomic.Int64
}

func (c *countingSecrets) getSecret(ctx context.Context, user string, key client.ObjectKey) (*corev1.Secret, error) {
	c.gets.Add(1)
	return c.secretGetter.getSecret(ctx, user, key)
}

// TestWebhookSecretReadsBounded is I13 (what a caller can cost): requests for a Sync, signed
// or not, read its Secret from the API server at most once per TokenTTL (every request read
// it, so anyone could turn requests into Secret reads, and time them against a missing Sync);
// a rotated token is used once the TTL has passed.
func TestWebhookSecretReadsBounded(t *testing.T) {
	opts := DefaultOptions()
	var later atomic.Int64 // how far the token cache's clock is ahead
	secrets := &countingSecrets{}
	h := newHookFixture(t, opts, func(w *Receiver) {
		secrets.secretGetter = w.secrets
		w.secrets = secrets
		w.tokens.now = func() time.Time { return time.Now().Add(time.Duration(later.Load())) }
	})
	h.sync("a", "secret-a")
	body := []byte(`{}`)
	for i := range 10 {
		if code, _ := h.post("a", body, github("wrong", body, strconv.Itoa(i))); code != http.StatusUnauthorized {
			t.Fatalf("wrong signature: %d, want 401", code)
		}
		if code, _ := h.post("a", body, nil); code != http.StatusUnauthorized {
			t.Fatalf("unsigned: %d, want 401", code)
		}
	}
	if code, _ := h.post("a", body, github("secret-a", body, "ok-1")); code != http.StatusAccepted {
		t.Fatalf("signed: %d, want 202", code)
	}
	if got := secrets.gets.Load(); got != 1 {
		t.Errorf("21 requests read the Secret %d times, want 1", got)
	}

	sec := &corev1.Secret{}
	if err := h.c.Get(context.Background(), client.ObjectKey{Namespace: h.ns, Name: "a-webhook"}, sec); err != nil {
		t.Fatal(err)
	}
	sec.Data = map[string][]byte{TokenKey: []byte("secret-new")}
	if err := h.c.Update(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	later.Store(int64(opts.TokenTTL))
	rotated := []byte(`{"after":"2"}`)
	if code, _ := h.post("a", rotated, github("secret-new", rotated, "ok-2")); code != http.StatusAccepted {
		t.Errorf("signed with the rotated token after the TTL: %d, want 202", code)
	}
	if code, _ := h.post("a", body, github("secret-a", body, "old")); code != http.StatusUnauthorized {
		t.Errorf("signed with the old token after the rotation: %d, want 401", code)
	}
	if got := secrets.gets.Load(); got != 2 {
		t.Errorf("the Secret was read %d times, want 2 (once more after the TTL)", got)
	}
}

// TestWebhookRefusesWithoutTriggering checks a refused request writes nothing: b stays
// untouched after a request signed with a's secret.
func TestWebhookRefusesWithoutTriggering(t *testing.T) {
	h := newHookFixture(t, DefaultOptions())
	h.sync("a", "secret-a")
	h.sync("b", "secret-b")
	body := []byte(`{}`)
	if code, _ := h.post("b", body, github("secret-a", body, "x")); code != http.StatusUnauthorized {
		t.Errorf("b signed with a's secret: %d, want 401", code)
	}
	if got := h.requestedAt("b"); got != "" {
		t.Errorf("b was triggered by a's secret: requestedAt %q", got)
	}
}

// TestWebhookBodyOverLimit checks a body over the limit, declared or streamed (chunked), for
// GitHub and GitLab, gets 413 and triggers nothing (it was truncated, then failed its
// signature with 401).
func TestWebhookBodyOverLimit(t *testing.T) {
	opts := DefaultOptions()
	opts.MaxBodyBytes = 1024
	h := newHookFixture(t, opts)
	h.sync("a", "secret-a")
	big := bytes.Repeat([]byte("x"), 4096)
	if code, text := h.post("a", big, github("secret-a", big, "1")); code != http.StatusRequestEntityTooLarge {
		t.Errorf("body of 4096 bytes: %d %q, want 413", code, text)
	}
	// Without a Content-Length (chunked), the limit is met while the body is streamed.
	chunked := func() (int, string) {
		req, err := http.NewRequest(http.MethodPost, h.url+"a", io.MultiReader(bytes.NewReader(big)))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range github("secret-a", big, "3") {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer func() { _ = resp.Body.Close() }()
		return resp.StatusCode, resp.Header.Get("Connection")
	}
	if code, conn := chunked(); code != http.StatusRequestEntityTooLarge {
		t.Errorf("chunked body of 4096 bytes: %d (%s), want 413", code, conn)
	}
	if code, text := h.post("a", big, map[string]string{"X-Gitlab-Token": "secret-a"}); code != http.StatusRequestEntityTooLarge {
		t.Errorf("GitLab body of 4096 bytes: %d %q, want 413", code, text)
	}
	if got := h.requestedAt("a"); got != "" {
		t.Errorf("a body over the limit triggered the Sync: requestedAt %q", got)
	}
	small := bytes.Repeat([]byte("x"), 1024)
	if code, text := h.post("a", small, github("secret-a", small, "2")); code != http.StatusAccepted {
		t.Errorf("body of 1024 bytes: %d %q, want 202", code, text)
	}
}

// TestWebhookIgnoresReplays checks a delivery handled once is not handled again: the same
// delivery ID, the same signed body under a new ID, and a GitLab Idempotency-Key repeat all
// leave requestedAt as the first delivery set it.
func TestWebhookIgnoresReplays(t *testing.T) {
	h := newHookFixture(t, DefaultOptions())
	h.sync("a", "secret-a")
	body := []byte(`{"after":"1111"}`)
	if code, text := h.post("a", body, github("secret-a", body, "delivery-1")); code != http.StatusAccepted {
		t.Fatalf("first delivery: %d %q, want 202", code, text)
	}
	first := h.requestedAt("a")
	if first == "" {
		t.Fatal("the first delivery set no requestedAt")
	}
	other := []byte(`{"after":"2222"}`)
	for _, tc := range []struct {
		name    string
		body    []byte
		headers map[string]string
	}{
		{"same delivery", body, github("secret-a", body, "delivery-1")},
		{"same body, new delivery ID", body, github("secret-a", body, "delivery-2")},
		{"same body, no delivery ID", body, github("secret-a", body, "")},
		{"same delivery ID, other body", other, github("secret-a", other, "delivery-1")},
	} {
		code, text := h.post("a", tc.body, tc.headers)
		if code != http.StatusOK || text != "delivery already handled\n" {
			t.Errorf("%s: %d %q, want 200 \"delivery already handled\"", tc.name, code, text)
		}
		if got := h.requestedAt("a"); got != first {
			t.Errorf("%s: requestedAt %q, want %q (untouched)", tc.name, got, first)
		}
	}

	gitlab := map[string]string{"X-Gitlab-Token": "secret-a", "Idempotency-Key": "k1"}
	if code, _ := h.post("a", body, gitlab); code != http.StatusAccepted {
		t.Fatalf("first GitLab delivery: %d, want 202", code)
	}
	second := h.requestedAt("a")
	if code, _ := h.post("a", body, gitlab); code != http.StatusOK {
		t.Errorf("repeated GitLab delivery: %d, want 200", code)
	}
	if got := h.requestedAt("a"); got != second {
		t.Errorf("repeated GitLab delivery: requestedAt %q, want %q", got, second)
	}
}

// TestWebhookCutsSlowClients checks a client that sends its headers or its body too slowly
// is answered or disconnected by the server (it was held as long as the client liked: the
// body had no read deadline). The timeouts are short options; the test only waits, boundedly.
func TestWebhookCutsSlowClients(t *testing.T) {
	opts := DefaultOptions()
	opts.Server.ReadHeaderTimeout = 300 * time.Millisecond
	opts.Server.ReadTimeout = 500 * time.Millisecond
	h := newHookFixture(t, opts)
	h.sync("a", "secret-a")
	h.post("a", nil, nil) // the server listens
	u, err := url.Parse(h.url)
	if err != nil {
		t.Fatal(err)
	}
	addr, path := u.Host, u.Path
	for _, tc := range []struct{ name, sent string }{
		{"slow headers", "POST " + path + "a HTTP/1.1\r\nHost: x\r\n"},
		{"slow body", "POST " + path + "a HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"},
	} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(conn, tc.sent); err != nil {
			t.Fatal(err)
		}
		// The client now stalls. The server must answer or close long before this deadline.
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, err = bufio.NewReader(conn).ReadByte()
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("%s: the server still held the connection after 30s", tc.name)
		}
		_ = conn.Close()
	}
	if got := h.requestedAt("a"); got != "" {
		t.Errorf("a cut request triggered the Sync: requestedAt %q", got)
	}
}

// TestWebhookPatchNamesTheUID checks the trigger carries the UID of the Sync whose secret was
// checked: a Sync recreated under the same name in between is not triggered (I14).
func TestWebhookPatchNamesTheUID(t *testing.T) {
	h := newHookFixture(t, DefaultOptions())
	h.sync("a", "secret-a")
	hook := &Receiver{client: h.c}
	err := hook.request(context.Background(), client.ObjectKey{Namespace: h.ns, Name: "a"}, types.UID("0b7e5a52-0000-0000-0000-000000000000"))
	if err == nil {
		t.Errorf("a trigger for another UID was accepted")
	}
	if got := h.requestedAt("a"); got != "" {
		t.Errorf("a trigger for another UID set requestedAt %q", got)
	}
}
