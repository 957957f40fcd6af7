package notify

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestErrorsCarryNoSecret: a receiver that echoes the request (URL, headers) into its
// error answer, and one that is not there at all, give errors that name the host and the
// status but no token, password, HMAC key or webhook path.
func TestErrorsCarryNoSecret(t *testing.T) {
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, "bad request to %s with %v", r.URL, r.Header)
	}))
	defer echo.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "http://" + ln.Addr().String()
	ln.Close()
	secrets := []string{"T0KEN-PATH-SECRET", "QUERY-SECRET", "bearer-SECRET", "pass-SECRET", "hmac-SECRET", "glpat-SECRET", "dTpwYXNzLVNFQ1JFVA=="} // the last: basic auth of u:pass-SECRET
	providers := func(base string) []Provider {
		return []Provider{
			{Name: "slack", Type: Slack, Address: base + "/services/T0KEN-PATH-SECRET"},
			{Name: "teams", Type: MSTeams, Address: base + "/invoke?sig=QUERY-SECRET"},
			{Name: "generic", Type: Generic, Address: base + "/hook", Token: "bearer-SECRET"},
			{Name: "hmac", Type: GenericHMAC, Address: base + "/hook", HMACKey: []byte("hmac-SECRET"), Username: "u", Password: "pass-SECRET"},
			{Name: "gitlab", Type: GitLab, Address: base + "/g/p", Token: "glpat-SECRET"},
		}
	}
	opts := fastRetries()
	opts.MaxAttempts = 2
	d, ch := startDispatcher(t, opts)
	n := 0
	for _, base := range []string{echo.URL, gone} {
		for _, p := range providers(base) {
			d.Send(p, testEvent())
			n++
		}
	}
	for range n {
		o := next(t, ch)
		if o.hook != "failed" {
			t.Fatalf("%s: outcome %s, want failed", o.p.Name, o.hook)
		}
		msg := o.err.Error() + fmt.Sprintf(" %+v", o.p)
		for _, s := range secrets {
			if strings.Contains(msg, s) {
				t.Errorf("%s: %q shows the secret %s", o.p.Name, msg, s)
			}
		}
		var se *StatusError
		if errors.As(o.err, &se) && (se.Code != http.StatusUnauthorized || !strings.Contains(msg, "[redacted]")) {
			t.Errorf("%s: %v, want status 401 with the echoed secrets redacted", o.p.Name, o.err)
		}
	}
}

// TestInvalidProviders: a bad type, address or missing secret is refused by Validate and,
// through Send, reported failed without a request or a retry; so is a commit status for a
// revision that names no commit.
func TestInvalidProviders(t *testing.T) {
	var rec recorder
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { rec.record(r) }))
	defer srv.Close()
	u := srv.URL
	tests := []struct {
		name string
		p    Provider
		want string
	}{
		{"unknown type", Provider{Type: "discord", Address: u}, "unknown type"},
		{"no scheme", Provider{Type: Generic, Address: "hooks.example/x"}, "scheme"},
		{"ssh address", Provider{Type: GitHub, Address: "ssh://git@github.com/org/repo", Token: "t"}, "scheme"},
		{"file scheme", Provider{Type: Generic, Address: "file:///etc/passwd"}, "scheme"},
		{"user info", Provider{Type: Generic, Address: "https://user:pw@hooks.example/x"}, "user info"},
		{"hmac without key", Provider{Type: GenericHMAC, Address: u}, "no HMAC key"},
		{"github without token", Provider{Type: GitHub, Address: u + "/org/repo"}, "no token"},
		{"github one segment", Provider{Type: GitHub, Address: u + "/org", Token: "t"}, "want /owner/repo"},
		{"github three segments", Provider{Type: GitHub, Address: u + "/org/repo/tree", Token: "t"}, "want /owner/repo"},
		{"github dot segment", Provider{Type: GitHub, Address: u + "/org/..", Token: "t"}, "want /owner/repo"},
		{"gitea query", Provider{Type: Gitea, Address: u + "/o/r?x=1", Token: "t"}, "query"},
		{"gitlab one segment", Provider{Type: GitLab, Address: u + "/project", Token: "t"}, "want /group"},
		{"gitlab encoded slash", Provider{Type: GitLab, Address: u + "/g%2Fh/p", Token: "t"}, "escaped characters"},
		{"bad CA bundle", Provider{Type: Generic, Address: u, CABundle: []byte("not pem")}, "CA bundle"},
	}
	d, ch := startDispatcher(t, fastRetries())
	for _, tt := range tests {
		tt.p.Name = tt.name
		if tt.name != "bad CA bundle" {
			if err := tt.p.Validate(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s: Validate: %v, want ErrInvalid naming %q", tt.name, err, tt.want)
			}
		}
		d.Send(tt.p, testEvent())
		if o := next(t, ch); o.hook != "failed" || !errors.Is(o.err, ErrInvalid) || !strings.Contains(o.err.Error(), tt.want) || strings.Contains(o.err.Error(), "gave up") {
			t.Errorf("%s: outcome %s: %v, want a final ErrInvalid naming %q", tt.name, o.hook, o.err, tt.want)
		}
	}
	for _, rev := range []string{"v1.2.3@sha256:" + strings.Repeat("ab", 32), "", "main@sha1:abc"} {
		e := testEvent()
		e.Revision = rev
		d.Send(Provider{Name: "gh", Type: GitHub, Address: u + "/org/repo", Token: "t"}, e)
		if o := next(t, ch); o.hook != "failed" || !errors.Is(o.err, ErrNoCommit) || strings.Contains(o.err.Error(), "gave up") {
			t.Errorf("revision %q: outcome %s: %v, want a final ErrNoCommit", rev, o.hook, o.err)
		}
	}
	e := testEvent()
	e.Cluster = ""
	d.Send(Provider{Name: "gh", Type: GitHub, Address: u + "/org/repo", Token: "t"}, e)
	if o := next(t, ch); o.hook != "failed" || !strings.Contains(o.err.Error(), "no cluster name") {
		t.Errorf("no cluster: outcome %s: %v, want refused for want of a cluster name", o.hook, o.err)
	}
	if rec.n.Load() != 0 {
		t.Errorf("receiver got %d requests", rec.n.Load())
	}
}
