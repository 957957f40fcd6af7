package oci

import (
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/converge-dev/converge/sources/netguard"
)

// listenNonLocal listens on an address of this machine that the guard allows (an
// interface's own unicast address), so a server there stands for a remote registry.
func listenNonLocal(t *testing.T) net.Listener {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		prefix, err := netip.ParsePrefix(a.String())
		if err != nil {
			continue
		}
		if _, refused := netguard.Refused(prefix.Addr()); refused {
			continue
		}
		if ln, err := net.Listen("tcp", netip.AddrPortFrom(prefix.Addr(), 0).String()); err == nil {
			return ln
		}
	}
	t.Skip("no interface address outside loopback and link-local to stand for a remote registry")
	return nil
}

// TestFetchRefusesRedirectToLocalAddress: a registry the guard allows that redirects to a
// loopback address is refused where the redirect is dialed, naming the artifact; the
// loopback server sees no request.
func TestFetchRefusesRedirectToLocalAddress(t *testing.T) {
	local, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hit := make(chan struct{}, 16)
	go func() {
		_ = http.Serve(local, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hit <- struct{}{} }))
	}()
	defer local.Close()
	ln := listenNonLocal(t)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://"+local.Addr().String()+r.URL.Path, http.StatusTemporaryRedirect)
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	a := Artifact{URL: "oci://" + ln.Addr().String() + "/app", Ref: Ref{Tag: "v1"}, Insecure: true}
	_, err = NewFetcher(t.TempDir()).Fetch(t.Context(), a, DefaultFetchOptions())
	if !errors.Is(err, ErrLocal) || !strings.Contains(err.Error(), a.String()) || !strings.Contains(err.Error(), "loopback address refused") {
		t.Fatalf("Fetch error %v, want ErrLocal naming %s and the loopback address", err, a)
	}
	if len(hit) != 0 {
		t.Errorf("the loopback server received %d requests", len(hit))
	}
}
