package netguard

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
)

// TestCheck: the refused and allowed ranges, IPv4-mapped forms included, and the caller's
// error and hint in a refusal.
func TestCheck(t *testing.T) {
	tests := []struct {
		addr string
		want string // refusal kind; empty: allowed
	}{
		{"127.0.0.1", "loopback"}, {"127.1.2.3", "loopback"}, {"::1", "loopback"},
		{"::ffff:127.0.0.1", "loopback"}, {"169.254.169.254", "link-local"}, {"::ffff:169.254.169.254", "link-local"},
		{"fe80::1", "link-local"}, {"fe80::1%eth0", "link-local"}, {"0.0.0.0", "unspecified"}, {"::", "unspecified"},
		{"::ffff:0.0.0.0", "unspecified"}, {"224.0.0.1", "multicast"}, {"ff02::1", "multicast"},
		{"fd00:ec2::254", "cloud metadata"}, {"100.100.100.200", "cloud metadata"},
		{"10.0.0.1", ""}, {"172.16.0.1", ""}, {"192.168.1.1", ""}, {"fd00::1", ""}, {"140.82.112.3", ""},
		{"2606:50c0:8000::153", ""}, {"::ffff:10.0.0.1", ""},
	}
	errMine := errors.New("mine")
	p := Policy{Err: errMine, Hint: "allow with --flag"}
	for _, tt := range tests {
		got := ""
		if err := p.Check(netip.AddrPortFrom(netip.MustParseAddr(tt.addr), 443)); err != nil {
			var ae *AddressError
			if !errors.As(err, &ae) || !errors.Is(err, errMine) || !strings.Contains(err.Error(), "--flag") {
				t.Fatalf("%s: error %v is no AddressError wrapping the policy's error with its hint", tt.addr, err)
			}
			got = ae.Kind
		}
		if got != tt.want {
			t.Errorf("%s: refused as %q, want %q", tt.addr, got, tt.want)
		}
		if err := (Policy{AllowLocal: true}).Check(netip.AddrPortFrom(netip.MustParseAddr(tt.addr), 443)); err != nil {
			t.Errorf("%s: refused with AllowLocal: %v", tt.addr, err)
		}
	}
}

// TestDialerRefusesResolvedLoopback: a name that resolves to loopback is refused where it
// is dialed, and allowed with AllowLocal.
func TestDialerRefusesResolvedLoopback(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	_, err = Policy{}.Dialer().DialContext(t.Context(), "tcp", net.JoinHostPort("localhost", port))
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("dial localhost: %v, want ErrRefused", err)
	}
	c, err := Policy{AllowLocal: true}.Dialer().DialContext(t.Context(), "tcp", net.JoinHostPort("localhost", port))
	if err != nil {
		t.Fatalf("dial localhost with AllowLocal: %v", err)
	}
	c.Close()
}
