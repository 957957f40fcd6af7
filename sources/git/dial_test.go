package git

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	gogit "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage/memory"
)

// TestFetchRefusesLocalAddresses: a URL whose address is on the daemon's machine or link
// (loopback by IP or by name, IPv4-mapped, unspecified, link-local metadata, over HTTP and
// SSH) is refused where it is dialed unless AllowLocal, and fetched with it. Without it, every
// one was fetched (or dialed).
func TestFetchRefusesLocalAddresses(t *testing.T) {
	r := newTestRepo(t)
	head := r.commit("one", map[string]string{"v.txt": "one"})
	r.push()
	httpURL, log := serveHTTP(t, r.root, &httpCreds{user: "alice", password: "s3cret"})
	port := strings.TrimSuffix(strings.TrimPrefix(httpURL, "http://127.0.0.1:"), "/repo.git")
	srv := serveSSH(t, r.root)
	basic := Auth{Username: "alice", Password: "s3cret"}
	key := Auth{SSHPrivateKey: srv.clientKey, SSHKnownHosts: srv.knownHosts}

	tests := []struct {
		name     string
		url      string
		auth     Auth
		wantAddr string // in the error: the resolved address refused
		// fetchable: the server answers there, so AllowLocal must fetch it
		fetchable bool
	}{
		{name: "loopback", url: httpURL, auth: basic, wantAddr: "127.0.0.1:" + port, fetchable: true},
		{name: "name resolving to loopback", url: "http://localhost:" + port + "/repo.git", auth: basic, wantAddr: ":" + port, fetchable: true},
		{name: "credentials in url", url: "http://alice:s3cret@127.0.0.1:" + port + "/repo.git", wantAddr: "127.0.0.1:" + port, fetchable: true},
		{name: "ipv4-mapped loopback", url: "http://[::ffff:127.0.0.1]:" + port + "/repo.git", auth: basic, wantAddr: "[::ffff:127.0.0.1]:" + port},
		{name: "ipv6 loopback", url: "http://[::1]:" + port + "/repo.git", auth: basic, wantAddr: "[::1]:" + port},
		{name: "unspecified", url: "http://0.0.0.0:" + port + "/repo.git", auth: basic, wantAddr: "0.0.0.0:" + port},
		{name: "cloud metadata", url: "http://169.254.169.254/repo.git", wantAddr: "169.254.169.254:80"},
		{name: "https link-local", url: "https://[fe80::1]/repo.git", wantAddr: "[fe80::1]:443"},
		{name: "ssh loopback", url: "ssh://git@" + srv.addr + "/repo.git", auth: key, wantAddr: srv.addr, fetchable: true},
		{name: "scp-like ssh to localhost", url: "git@localhost:repo.git", auth: key, wantAddr: ":22"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := NewFetcher(t.TempDir())
			repo := Repository{URL: tt.url, Ref: Ref{Branch: "main"}, Auth: tt.auth}
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			if tt.fetchable {
				// First with AllowLocal: its kept-alive connection must not serve the refused fetch.
				co, err := f.Fetch(ctx, repo, loopbackOptions())
				if err != nil {
					t.Fatalf("Fetch with AllowLocal: %v", err)
				}
				if co.Commit != head {
					t.Fatalf("fetched %s, want %s", co.Commit, head)
				}
			}
			log.take()
			co, err := f.Fetch(ctx, repo, DefaultFetchOptions())
			if err == nil {
				t.Fatalf("Fetch of %s served %s", tt.url, co.Revision)
			}
			if seen := log.take(); len(seen) != 0 {
				t.Errorf("the refused fetch reached the server: %v", seen)
			}
			var ae *AddressError
			if !errors.Is(err, ErrLocalURL) || !IsTerminal(err) || !errors.As(err, &ae) {
				t.Fatalf("Fetch error %v, want a terminal ErrLocalURL with an AddressError", err)
			}
			msg := err.Error()
			for _, want := range []string{"fetch " + redact(tt.url), tt.wantAddr, "--allow-local-git"} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not contain %q", msg, want)
				}
			}
			if strings.Contains(msg, "s3cret") {
				t.Errorf("error %q leaks the password", msg)
			}
		})
	}
}

// TestFetchRefusesRedirectToLocalAddress: a server the fetch may reach that redirects to a
// loopback address is refused at the redirect; with AllowLocal the same redirect is
// followed. Without it, the redirect was followed without AllowLocal too.
func TestFetchRefusesRedirectToLocalAddress(t *testing.T) {
	r := newTestRepo(t)
	head := r.commit("one", map[string]string{"v.txt": "one"})
	r.push()
	target, log := serveHTTP(t, r.root, nil)
	ln := listenNonLocal(t)
	redirector := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		http.Redirect(w, req, strings.TrimSuffix(target, "/repo.git")+req.URL.RequestURI(), http.StatusFound)
	}))
	redirector.Listener = ln
	redirector.Start()
	t.Cleanup(redirector.Close)
	repo := Repository{URL: redirector.URL + "/repo.git", Ref: Ref{Branch: "main"}}

	co, err := NewFetcher(t.TempDir()).Fetch(t.Context(), repo, loopbackOptions())
	if err != nil {
		t.Fatalf("Fetch with AllowLocal: %v", err)
	}
	if co.Commit != head {
		t.Fatalf("fetched %s, want %s", co.Commit, head)
	}
	log.take()

	co, err = NewFetcher(t.TempDir()).Fetch(t.Context(), repo, DefaultFetchOptions())
	if err == nil {
		t.Fatalf("Fetch through a redirect to loopback served %s", co.Revision)
	}
	if seen := log.take(); len(seen) != 0 {
		t.Errorf("the redirect reached the loopback server: %v", seen)
	}
	if !errors.Is(err, ErrLocalURL) || !strings.Contains(err.Error(), "loopback address refused") || !strings.Contains(err.Error(), repo.URL) {
		t.Fatalf("Fetch error %v, want the loopback address refused for %s", err, repo.URL)
	}
}

// TestGoGitOutsideFetchIsStrict: once a Fetcher exists, go-git used without Fetch (no
// policy in the request's context or the endpoint) gets the strict policy, over HTTP and
// SSH: the process-wide transports fail closed.
func TestGoGitOutsideFetchIsStrict(t *testing.T) {
	r := newTestRepo(t)
	r.commit("one", map[string]string{"v.txt": "one"})
	r.push()
	httpURL, log := serveHTTP(t, r.root, nil)
	srv := serveSSH(t, r.root)
	sshURL := "ssh://git@" + srv.addr + "/repo.git"
	sshAuth, err := authMethod(sshURL, Auth{SSHPrivateKey: srv.clientKey, SSHKnownHosts: srv.knownHosts}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	NewFetcher(t.TempDir())
	for url, auth := range map[string]transport.AuthMethod{httpURL: nil, sshURL: sshAuth} {
		remote := gogit.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: "origin", URLs: []string{url}})
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		_, err := remote.ListContext(ctx, &gogit.ListOptions{Auth: auth})
		cancel()
		if _, ok := refusedAddress(err); !ok {
			t.Errorf("go-git list of %s: %v, want an AddressError", url, err)
		}
	}
	if seen := log.take(); len(seen) != 0 {
		t.Errorf("go-git reached the loopback server: %v", seen)
	}
}

// TestFetchErrorBodyBounded: a server's error answer is read only up to maxErrorBody, so
// an endless 404 can neither fill the daemon's memory nor the Sync's status. Without it, go-git
// read the whole body into the error message.
func TestFetchErrorBodyBounded(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte("Repository not found. "))
		_, _ = w.Write([]byte(strings.Repeat("x", 8<<20)))
	}))
	t.Cleanup(srv.Close)
	_, err := NewFetcher(t.TempDir()).Fetch(t.Context(), Repository{URL: srv.URL + "/repo.git"}, loopbackOptions())
	if err == nil || !strings.Contains(err.Error(), "Repository not found.") || len(err.Error()) > maxErrorBody+1024 {
		t.Fatalf("Fetch error of %d bytes (%.200s…), want the server's message cut at %d bytes", len(fmt.Sprint(err)), err, maxErrorBody)
	}
}

// listenNonLocal listens on an address of this machine that the guard allows (an
// interface's own unicast address), so a test server there stands for a remote one.
func listenNonLocal(t *testing.T) net.Listener {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		prefix, err := netip.ParsePrefix(a.String())
		if err != nil || checkAddress(netip.AddrPortFrom(prefix.Addr(), 1)) != nil {
			continue
		}
		ln, err := net.Listen("tcp", netip.AddrPortFrom(prefix.Addr(), 0).String())
		if err == nil {
			return ln
		}
	}
	t.Skip("no interface address outside loopback and link-local to stand for a remote server")
	return nil
}

// TestCheckAddress: the refused and allowed ranges, IPv4-mapped forms included.
func TestCheckAddress(t *testing.T) {
	tests := []struct {
		addr string
		want string // refusal kind; empty: allowed
	}{
		{"127.0.0.1", "loopback"}, {"127.1.2.3", "loopback"}, {"::1", "loopback"},
		{"::ffff:127.0.0.1", "loopback"}, {"169.254.169.254", "link-local"}, {"::ffff:169.254.169.254", "link-local"},
		{"fe80::1", "link-local"}, {"fe80::1%eth0", "link-local"}, {"0.0.0.0", "unspecified"}, {"::", "unspecified"},
		{"::ffff:0.0.0.0", "unspecified"}, {"224.0.0.1", "multicast"}, {"ff02::1", "multicast"},
		{"fd00:ec2::254", "cloud metadata"},
		{"10.0.0.1", ""}, {"172.16.0.1", ""}, {"192.168.1.1", ""}, {"fd00::1", ""}, {"140.82.112.3", ""},
		{"2606:50c0:8000::153", ""}, {"::ffff:10.0.0.1", ""},
	}
	for _, tt := range tests {
		got := ""
		if err := checkAddress(netip.AddrPortFrom(netip.MustParseAddr(tt.addr), 443)); err != nil {
			var ae *AddressError
			if !errors.As(err, &ae) || !errors.Is(err, ErrLocalURL) {
				t.Fatalf("%s: error %v is no AddressError wrapping ErrLocalURL", tt.addr, err)
			}
			got = ae.Kind
		}
		if got != tt.want {
			t.Errorf("%s: refused as %q, want %q", tt.addr, got, tt.want)
		}
	}
}
