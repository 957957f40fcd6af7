package notify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
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
	headers map[string]string // the provider's own headers (credentials, API version): exact values
	signKey []byte            // generic-hmac: X-Signature is sha256=<hex HMAC-SHA256 of the exact body>
	body    any               // the whole body, as encoding/json decodes it into an any
}

// commonHeaders are the headers every provider sends.
var commonHeaders = map[string]string{"Content-Type": "application/json", "User-Agent": "converge-notify"}

// transportHeaders are added by net/http, whatever the provider: allowed, not checked.
var transportHeaders = map[string]bool{"Accept-Encoding": true, "Content-Length": true}

// check returns what differs from the documented request: the method, the path and query,
// each header (common, the provider's own, the signature) with its exact value, any other
// header (a credential the provider should not send), and the whole body.
func (x expect) check(r *http.Request, raw []byte) []string {
	var bad []string
	if r.Method != http.MethodPost {
		bad = append(bad, "method "+r.Method)
	}
	if r.RequestURI != x.path {
		bad = append(bad, fmt.Sprintf("path %q, want %q", r.RequestURI, x.path))
	}
	want := map[string]string{}
	for _, hs := range []map[string]string{commonHeaders, x.headers} {
		for k, v := range hs {
			want[http.CanonicalHeaderKey(k)] = v
		}
	}
	if x.signKey != nil {
		mac := hmac.New(sha256.New, x.signKey)
		mac.Write(raw)
		want["X-Signature"] = "sha256=" + hex.EncodeToString(mac.Sum(nil))
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if got := r.Header.Values(k); len(got) != 1 || got[0] != want[k] {
			bad = append(bad, fmt.Sprintf("header %s = %q, want %q", k, got, want[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(r.Header)) {
		if _, ok := want[k]; !ok && !transportHeaders[k] {
			bad = append(bad, fmt.Sprintf("unexpected header %s: %q", k, r.Header[k]))
		}
	}
	var got any
	if err := json.Unmarshal(raw, &got); err != nil {
		return append(bad, fmt.Sprintf("body %q: %v", raw, err))
	}
	if diff := cmp.Diff(x.body, got); diff != "" {
		bad = append(bad, "body (-want +got):\n"+diff)
	}
	return bad
}

// obj and arr spell a decoded JSON body.
type (
	obj = map[string]any
	arr = []any
)

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
	github := func(token string) map[string]string {
		return map[string]string{"Authorization": "Bearer " + token, "Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}
	}
	// The chat facts of e, in the documented order; Slack's fields are short but the
	// revision.
	ts := float64(e.Time.Unix()) // Slack's ts: the event time in Unix seconds
	slackFields := arr{
		obj{"title": "transition", "value": "Failed", "short": true},
		obj{"title": "revision", "value": e.Revision, "short": false},
		obj{"title": "reason", "value": "HealthCheckFailed", "short": true},
		obj{"title": "cluster", "value": "prod-eu", "short": true},
		obj{"title": "time", "value": "2026-11-27T03:00:00Z", "short": true},
	}
	teamsCard := func(items ...any) obj {
		return obj{"type": "message", "attachments": arr{obj{
			"contentType": "application/vnd.microsoft.card.adaptive",
			"content": obj{
				"$schema": "http://adaptivecards.io/schemas/adaptive-card.json", "type": "AdaptiveCard", "version": "1.4",
				"msteams": obj{"width": "Full"},
				"body":    arr{obj{"type": "Container", "items": arr(items)}},
			},
		}}}
	}
	long := strings.Repeat("x", 4000)
	return []requestCase{
		{name: "generic", p: Provider{Type: Generic, Address: "/hooks/T0K3N-in-path"},
			x: expect{path: "/hooks/T0K3N-in-path",
				body: obj{"namespace": "apps", "name": "web", "transition": "Failed",
					"revision": e.Revision, "reason": "HealthCheckFailed", "message": e.Message,
					"time": "2026-11-27T03:00:00Z", "cluster": "prod-eu"}}},
		{name: "generic bearer", p: Provider{Type: Generic, Address: "/in", Token: "bearer-secret"},
			ev: func(e Event) Event { e.Transition, e.Message, e.Reason = BecameReady, "", ""; return e },
			x: expect{path: "/in", headers: map[string]string{"Authorization": "Bearer bearer-secret"},
				body: obj{"namespace": "apps", "name": "web", "transition": "BecameReady",
					"revision": e.Revision, "time": "2026-11-27T03:00:00Z", "cluster": "prod-eu"}}},
		{name: "generic-hmac", p: Provider{Type: GenericHMAC, Address: "/signed?team=a", HMACKey: []byte("hmac-key-secret"), Username: "bot", Password: "pass-secret"},
			ev: func(e Event) Event { e.Message = long + long + long; return e },
			x: expect{path: "/signed?team=a", headers: map[string]string{"Authorization": "Basic Ym90OnBhc3Mtc2VjcmV0"},
				signKey: []byte("hmac-key-secret"),
				body: obj{"namespace": "apps", "name": "web", "transition": "Failed",
					"revision": e.Revision, "reason": "HealthCheckFailed", "message": strings.Repeat("x", 8191) + "…",
					"time": "2026-11-27T03:00:00Z", "cluster": "prod-eu"}}},
		{name: "slack", p: Provider{Type: Slack, Address: "/services/T000/B000/XXXX"},
			x: expect{path: "/services/T000/B000/XXXX",
				body: obj{"username": "converge", "text": "apps/web failed", "attachments": arr{obj{
					"color": "danger", "title": "apps/web failed", "text": e.Message, "mrkdwn_in": arr{"text"},
					"fields": slackFields, "ts": ts}}}}},
		{name: "slack bot token", p: Provider{Type: Slack, Address: "/api/chat.postMessage", Token: "xoxb-secret", Channel: "#deploys"},
			ev: func(e Event) Event {
				e.Transition, e.Message, e.Reason, e.Cluster = Drifted, long, "", ""
				e.Revision = "main@sha1:" + strings.Repeat("a", 400)
				return e
			},
			x: expect{path: "/api/chat.postMessage", headers: map[string]string{"Authorization": "Bearer xoxb-secret"},
				body: obj{"channel": "#deploys", "username": "converge", "text": "apps/web drifted", "attachments": arr{obj{
					"color": "warning", "title": "apps/web drifted", "text": strings.Repeat("x", 2999) + "…", "mrkdwn_in": arr{"text"},
					"fields": arr{
						obj{"title": "transition", "value": "Drifted", "short": true},
						obj{"title": "revision", "value": "main@sha1:" + strings.Repeat("a", 289) + "…", "short": false},
						obj{"title": "time", "value": "2026-11-27T03:00:00Z", "short": true},
					},
					"ts": ts}}}}},
		{name: "msteams", p: Provider{Type: MSTeams, Address: "/workflows/abc/triggers/manual/paths/invoke?sig=s3cr3t"},
			x: expect{path: "/workflows/abc/triggers/manual/paths/invoke?sig=s3cr3t",
				body: teamsCard(
					obj{"type": "TextBlock", "text": "apps/web failed", "size": "large", "weight": "bolder", "wrap": true},
					obj{"type": "TextBlock", "text": e.Message, "color": "attention", "wrap": true},
					obj{"type": "FactSet", "facts": arr{
						obj{"title": "transition", "value": "Failed"},
						obj{"title": "revision", "value": e.Revision},
						obj{"title": "reason", "value": "HealthCheckFailed"},
						obj{"title": "cluster", "value": "prod-eu"},
						obj{"title": "time", "value": "2026-11-27T03:00:00Z"},
					}})}},
		{name: "msteams rolled back", p: Provider{Type: MSTeams, Address: "/workflows/abc/triggers/manual/paths/invoke?sig=s3cr3t"},
			ev: func(e Event) Event { e.Transition, e.Message = RolledBack, long; return e },
			x: expect{path: "/workflows/abc/triggers/manual/paths/invoke?sig=s3cr3t",
				body: teamsCard(
					obj{"type": "TextBlock", "text": "apps/web rolled back", "size": "large", "weight": "bolder", "wrap": true},
					obj{"type": "TextBlock", "text": strings.Repeat("x", 2999) + "…", "color": "attention", "wrap": true},
					obj{"type": "FactSet", "facts": arr{
						obj{"title": "transition", "value": "RolledBack"},
						obj{"title": "revision", "value": e.Revision},
						obj{"title": "reason", "value": "HealthCheckFailed"},
						obj{"title": "cluster", "value": "prod-eu"},
						obj{"title": "time", "value": "2026-11-27T03:00:00Z"},
					}})}},
		// No message: no message TextBlock (a TextBlock's text is required in Adaptive Cards).
		{name: "msteams ready", p: Provider{Type: MSTeams, Address: "/workflows/abc/triggers/manual/paths/invoke?sig=s3cr3t"},
			ev: func(e Event) Event { e.Transition, e.Message, e.Reason = BecameReady, "", ""; return e },
			x: expect{path: "/workflows/abc/triggers/manual/paths/invoke?sig=s3cr3t",
				body: teamsCard(
					obj{"type": "TextBlock", "text": "apps/web became Ready", "size": "large", "weight": "bolder", "wrap": true},
					obj{"type": "FactSet", "facts": arr{
						obj{"title": "transition", "value": "BecameReady"},
						obj{"title": "revision", "value": e.Revision},
						obj{"title": "cluster", "value": "prod-eu"},
						obj{"title": "time", "value": "2026-11-27T03:00:00Z"},
					}})}},
		{name: "github", p: Provider{Type: GitHub, Address: "/org/repo", Token: "ghp-secret"},
			x: expect{path: "/api/v3/repos/org/repo/statuses/" + testSHA, headers: github("ghp-secret"),
				body: obj{"state": "failure", "context": "converge/prod-eu/apps/web", "description": desc(140)}}},
		{name: "github cluster key", p: Provider{Type: GitHub, Address: "/org/repo.git", Token: "ghp-secret", Cluster: "prod-us"},
			ev: func(e Event) Event { e.Transition = BecameReady; return e },
			x: expect{path: "/api/v3/repos/org/repo/statuses/" + testSHA, headers: github("ghp-secret"),
				body: obj{"state": "success", "context": "converge/prod-us/apps/web",
					"description": truncate("apps/web became Ready: HealthCheckFailed: "+strings.Join(strings.Fields(e.Message), " "), 140)}}},
		{name: "gitlab", p: Provider{Type: GitLab, Address: "/group/sub/project", Token: "glpat-secret"},
			x: expect{path: "/api/v4/projects/group%2Fsub%2Fproject/statuses/" + testSHA,
				headers: map[string]string{"PRIVATE-TOKEN": "glpat-secret"},
				body:    obj{"state": "failed", "name": "converge/prod-eu/apps/web", "description": desc(255)}}},
		{name: "gitea", p: Provider{Type: Gitea, Address: "/owner/repo/", Token: "gitea-secret"},
			ev: func(e Event) Event { e.Transition = Drifted; return e },
			x: expect{path: "/api/v1/repos/owner/repo/statuses/" + testSHA,
				headers: map[string]string{"Authorization": "token gitea-secret"},
				body: obj{"state": "warning", "context": "converge/prod-eu/apps/web",
					"description": truncate("apps/web drifted: HealthCheckFailed: "+strings.Join(strings.Fields(e.Message), " "), 255)}}},
	}
}

// TestProviderRequests: each provider sends its documented request (method, path and
// query, Content-Type, User-Agent, its credentials and signature and no other header, the
// whole body) to a local receiver that rejects anything else, and the delivery is reported.
func TestProviderRequests(t *testing.T) {
	e := testEvent()
	tests := requestCases(e)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rec recorder
			srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				raw := rec.record(r)
				if bad := tt.x.check(r, raw); len(bad) > 0 {
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
