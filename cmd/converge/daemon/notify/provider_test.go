package notify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

const testSHA = "4a5b6c7d8e9f00112233445566778899aabbccdd"

// testEvent is a failure with a long, multi-line message.
func testEvent() Event {
	return Event{Namespace: "apps", Name: "web", Transition: Failed, Revision: "main@sha1:" + testSHA,
		Reason: "HealthCheckFailed", Message: "1 object not Current within spec.timeout (3m):\n" + strings.Repeat("Deployment/apps/web: 0/3 replicas ", 20),
		Time: time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC), Cluster: "prod-eu"}
}

// expect is a receiver's documented request: anything else fails the test and is answered
// with 400.
type expect struct {
	path    string            // RequestURI, escaping as sent
	headers map[string]string // exact values
	absent  []string          // headers that must not be sent
	body    func(t *testing.T, raw []byte, h http.Header) []string
}

func (x expect) check(t *testing.T, r *http.Request, raw []byte) []string {
	var bad []string
	if r.Method != http.MethodPost {
		bad = append(bad, "method "+r.Method)
	}
	if r.RequestURI != x.path {
		bad = append(bad, fmt.Sprintf("path %q, want %q", r.RequestURI, x.path))
	}
	for k, v := range x.headers {
		if got := r.Header.Values(k); len(got) != 1 || got[0] != v {
			bad = append(bad, fmt.Sprintf("header %s = %q, want %q", k, got, v))
		}
	}
	for _, k := range x.absent {
		if r.Header.Get(k) != "" {
			bad = append(bad, "header "+k+" sent")
		}
	}
	return append(bad, x.body(t, raw, r.Header)...)
}

// exactJSON checks that the body is a JSON object with exactly want's fields and values.
func exactJSON(want map[string]any) func(*testing.T, []byte, http.Header) []string {
	return func(t *testing.T, raw []byte, _ http.Header) []string {
		var got map[string]any
		if err := json.Unmarshal(raw, &got); err != nil {
			return []string{"body: " + err.Error()}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			return []string{"body (-want +got):\n" + diff}
		}
		return nil
	}
}

// field reads a path of keys and indexes in a decoded JSON value.
func field(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			s, _ := v.([]any)
			if k >= len(s) {
				return nil
			}
			v = s[k]
		}
	}
	return v
}

// requestCase is one provider and the request its receiver accepts.
type requestCase struct {
	name string
	p    Provider // Address is the path, put after the receiver's URL
	ev   func(Event) Event
	x    expect
}

// requestCases are the documented requests for e, one or two per provider.
func requestCases(e Event) []requestCase {
	desc := func(limit int) string {
		return truncate("apps/web failed: HealthCheckFailed: "+strings.Join(strings.Fields(e.Message), " "), limit)
	}
	return []requestCase{
		{name: "generic", p: Provider{Type: Generic, Address: "/hooks/T0K3N-in-path"},
			x: expect{path: "/hooks/T0K3N-in-path", headers: map[string]string{"Content-Type": "application/json"},
				absent: []string{"Authorization", "X-Signature"},
				body: exactJSON(map[string]any{"namespace": "apps", "name": "web", "transition": "Failed",
					"revision": e.Revision, "reason": "HealthCheckFailed", "message": e.Message,
					"time": "2026-11-27T03:00:00Z", "cluster": "prod-eu"})}},
		{name: "generic bearer", p: Provider{Type: Generic, Address: "/in", Token: "bearer-secret"},
			ev: func(e Event) Event { e.Transition, e.Message, e.Reason = BecameReady, "", ""; return e },
			x: expect{path: "/in", headers: map[string]string{"Content-Type": "application/json", "Authorization": "Bearer bearer-secret"},
				body: exactJSON(map[string]any{"namespace": "apps", "name": "web", "transition": "BecameReady",
					"revision": e.Revision, "time": "2026-11-27T03:00:00Z", "cluster": "prod-eu"})}},
		{name: "generic-hmac", p: Provider{Type: GenericHMAC, Address: "/signed?team=a", HMACKey: []byte("hmac-key-secret"), Username: "bot", Password: "pass-secret"},
			x: expect{path: "/signed?team=a", headers: map[string]string{"Content-Type": "application/json", "Authorization": "Basic Ym90OnBhc3Mtc2VjcmV0"},
				body: func(t *testing.T, raw []byte, h http.Header) []string {
					mac := hmac.New(sha256.New, []byte("hmac-key-secret"))
					mac.Write(raw)
					if want := "sha256=" + hex.EncodeToString(mac.Sum(nil)); h.Get("X-Signature") != want {
						return []string{fmt.Sprintf("X-Signature %q, want %q", h.Get("X-Signature"), want)}
					}
					var m map[string]any
					if err := json.Unmarshal(raw, &m); err != nil || m["transition"] != "Failed" || m["name"] != "web" {
						return []string{fmt.Sprintf("body %s: %v", raw, err)}
					}
					return nil
				}}},
		{name: "slack", p: Provider{Type: Slack, Address: "/services/T000/B000/XXXX"},
			x: expect{path: "/services/T000/B000/XXXX", headers: map[string]string{"Content-Type": "application/json"}, absent: []string{"Authorization"},
				body: func(t *testing.T, raw []byte, _ http.Header) []string {
					var m any
					if err := json.Unmarshal(raw, &m); err != nil {
						return []string{err.Error()}
					}
					var bad []string
					for _, c := range []struct {
						path []any
						want any
					}{
						{[]any{"text"}, "apps/web failed"},
						{[]any{"username"}, "converge"},
						{[]any{"attachments", 0, "color"}, "danger"},
						{[]any{"attachments", 0, "title"}, "apps/web failed"},
						{[]any{"attachments", 0, "text"}, e.Message},
						{[]any{"attachments", 0, "fields", 1, "title"}, "revision"},
						{[]any{"attachments", 0, "fields", 1, "value"}, e.Revision},
					} {
						if got := field(m, c.path...); got != c.want {
							bad = append(bad, fmt.Sprintf("%v = %v, want %v", c.path, got, c.want))
						}
					}
					return bad
				}}},
		{name: "slack bot token", p: Provider{Type: Slack, Address: "/api/chat.postMessage", Token: "xoxb-secret", Channel: "#deploys"},
			x: expect{path: "/api/chat.postMessage", headers: map[string]string{"Content-Type": "application/json", "Authorization": "Bearer xoxb-secret"},
				body: func(t *testing.T, raw []byte, _ http.Header) []string {
					var m any
					if err := json.Unmarshal(raw, &m); err != nil || field(m, "channel") != "#deploys" {
						return []string{fmt.Sprintf("channel not #deploys in %s (%v)", raw, err)}
					}
					return nil
				}}},
		{name: "msteams", p: Provider{Type: MSTeams, Address: "/workflows/abc/triggers/manual/paths/invoke?sig=s3cr3t"},
			x: expect{path: "/workflows/abc/triggers/manual/paths/invoke?sig=s3cr3t", headers: map[string]string{"Content-Type": "application/json"}, absent: []string{"Authorization"},
				body: func(t *testing.T, raw []byte, _ http.Header) []string {
					var m any
					if err := json.Unmarshal(raw, &m); err != nil {
						return []string{err.Error()}
					}
					card := []any{"attachments", 0, "content"}
					items := append(card, "body", 0, "items")
					var bad []string
					for _, c := range []struct {
						path []any
						want any
					}{
						{[]any{"type"}, "message"},
						{[]any{"attachments", 0, "contentType"}, "application/vnd.microsoft.card.adaptive"},
						{append(card, "type"), "AdaptiveCard"},
						{append(card, "version"), "1.4"},
						{append(items, 0, "text"), "apps/web failed"},
						{append(items, 1, "text"), e.Message},
						{append(items, 1, "color"), "attention"},
						{append(items, 2, "type"), "FactSet"},
						{append(items, 2, "facts", 1, "value"), e.Revision},
					} {
						if got := field(m, c.path...); got != c.want {
							bad = append(bad, fmt.Sprintf("%v = %v, want %v", c.path, got, c.want))
						}
					}
					return bad
				}}},
		{name: "github", p: Provider{Type: GitHub, Address: "/org/repo", Token: "ghp-secret"},
			x: expect{path: "/api/v3/repos/org/repo/statuses/" + testSHA,
				headers: map[string]string{"Content-Type": "application/json", "Authorization": "Bearer ghp-secret",
					"Accept": "application/vnd.github+json", "X-Github-Api-Version": "2022-11-28"},
				body: exactJSON(map[string]any{"state": "failure", "context": "converge/prod-eu/apps/web", "description": desc(140)})}},
		{name: "github cluster key", p: Provider{Type: GitHub, Address: "/org/repo.git", Token: "ghp-secret", Cluster: "prod-us"},
			ev: func(e Event) Event { e.Transition = BecameReady; return e },
			x: expect{path: "/api/v3/repos/org/repo/statuses/" + testSHA,
				headers: map[string]string{"Authorization": "Bearer ghp-secret"},
				body: exactJSON(map[string]any{"state": "success", "context": "converge/prod-us/apps/web",
					"description": truncate("apps/web became Ready: HealthCheckFailed: "+strings.Join(strings.Fields(e.Message), " "), 140)})}},
		{name: "gitlab", p: Provider{Type: GitLab, Address: "/group/sub/project", Token: "glpat-secret"},
			x: expect{path: "/api/v4/projects/group%2Fsub%2Fproject/statuses/" + testSHA,
				headers: map[string]string{"Content-Type": "application/json", "Private-Token": "glpat-secret"}, absent: []string{"Authorization"},
				body: exactJSON(map[string]any{"state": "failed", "name": "converge/prod-eu/apps/web", "description": desc(255)})}},
		{name: "gitea", p: Provider{Type: Gitea, Address: "/owner/repo/", Token: "gitea-secret"},
			ev: func(e Event) Event { e.Transition = Drifted; return e },
			x: expect{path: "/api/v1/repos/owner/repo/statuses/" + testSHA,
				headers: map[string]string{"Content-Type": "application/json", "Authorization": "token gitea-secret"},
				body: exactJSON(map[string]any{"state": "warning", "context": "converge/prod-eu/apps/web",
					"description": truncate("apps/web drifted: HealthCheckFailed: "+strings.Join(strings.Fields(e.Message), " "), 255)})}},
	}
}

// TestProviderRequests: each provider sends its documented request (method, path,
// headers with its credentials, body fields, signature) to a local receiver that rejects
// anything else, and the delivery is reported.
func TestProviderRequests(t *testing.T) {
	e := testEvent()
	tests := requestCases(e)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rec recorder
			srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				raw := rec.record(r)
				if bad := tt.x.check(t, r, raw); len(bad) > 0 {
					for _, b := range bad {
						t.Errorf("receiver: %s", b)
					}
					http.Error(w, "not the documented request", http.StatusBadRequest)
					return
				}
				w.WriteHeader(http.StatusAccepted)
			}))
			defer srv.Close()
			p := tt.p
			p.Name, p.Address = "apps/"+tt.name, srv.URL+p.Address
			p.CABundle = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
			ev := e
			if tt.ev != nil {
				ev = tt.ev(e)
			}
			d, ch := startDispatcher(t, fastRetries())
			d.Send(p, ev)
			o := next(t, ch)
			if o.hook != "delivered" || o.err != nil {
				t.Fatalf("outcome %s: %v, want delivered", o.hook, o.err)
			}
			if o.p.Token != "" || o.p.HMACKey != nil || o.p.Password != "" || strings.Contains(o.p.Address, tt.p.Address) {
				t.Errorf("hook got the provider's secrets: %+v", o.p)
			}
			if rec.n.Load() != 1 {
				t.Errorf("receiver got %d requests, want 1", rec.n.Load())
			}
		})
	}
}

// TestGitHubPublicAPI: a github.com repository's status goes to api.github.com, with no
// /api/v3 prefix; descriptions are cut to 140 characters on a rune boundary.
func TestGitHubPublicAPI(t *testing.T) {
	tg, err := Provider{Type: GitHub, Address: "https://github.com/org/repo", Token: "x"}.target()
	if err != nil {
		t.Fatal(err)
	}
	e := testEvent()
	e.Message = strings.Repeat("é", 500)
	r, err := tg.build(e, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if want := "https://api.github.com/repos/org/repo/statuses/" + testSHA; r.url.String() != want {
		t.Errorf("URL %s, want %s", r.url, want)
	}
	var m map[string]string
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatal(err)
	}
	if n := utf8.RuneCountInString(m["description"]); n != 140 || !utf8.ValidString(m["description"]) {
		t.Errorf("description of %d characters (valid UTF-8: %v), want 140", n, utf8.ValidString(m["description"]))
	}
}
