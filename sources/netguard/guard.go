package netguard

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"
)

// Addresses refused unless Policy.AllowLocal: the machine itself and its link, where the
// daemon's own ports (metrics, health, webhook) and cloud metadata services answer. Private
// ranges (10/8, 172.16/12, 192.168/16, fc00::/7) stay allowed: in-cluster git servers and
// registries live there.
var refusedPrefixes = []struct {
	prefix netip.Prefix
	kind   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"}, // "this network": Linux routes 0.0.0.0 to the host
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"}, // 169.254.169.254: cloud metadata
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
	{netip.MustParsePrefix("255.255.255.255/32"), "broadcast"},
	// Metadata services outside the link-local range (AWS over IPv6, Alibaba Cloud).
	{netip.MustParsePrefix("fd00:ec2::254/128"), "cloud metadata"},
	{netip.MustParsePrefix("100.100.100.200/32"), "cloud metadata"},
	{netip.MustParsePrefix("168.63.129.16/32"), "cloud metadata"}, // Azure WireServer
}

// Policy is what one fetch may connect to, and how a refusal reads.
type Policy struct {
	// AllowLocal also allows the refused addresses (loopback, link-local, unspecified,
	// multicast, broadcast, cloud metadata).
	AllowLocal bool
	// Err is wrapped by every refusal, so the caller classifies it with errors.Is (git:
	// ErrLocalURL). Nil: ErrRefused.
	Err error
	// Hint ends a refusal's message: how an operator allows such addresses.
	Hint string
}

// ErrRefused is the default Policy.Err.
var ErrRefused = errors.New("address refused")

// AddressError reports a connection refused by a Policy: the address is on the daemon's
// machine or its link. It wraps the Policy's Err.
type AddressError struct {
	// Addr is the resolved address and port that was refused.
	Addr netip.AddrPort
	// Kind says why: "loopback", "link-local", "unspecified", "multicast", ….
	Kind string
	err  error
	hint string
}

func (e *AddressError) Error() string {
	msg := fmt.Sprintf("connect to %s: %s address refused: %v", e.Addr, e.Kind, e.err)
	if e.hint != "" {
		msg += " (" + e.hint + ")"
	}
	return msg
}

// Unwrap returns the Policy's Err.
func (e *AddressError) Unwrap() error { return e.err }

func (p Policy) err() error {
	if p.Err == nil {
		return ErrRefused
	}
	return p.Err
}

// Check returns an *AddressError if ap is refused (IPv4-mapped IPv6 forms included), nil
// otherwise. With AllowLocal nothing is refused.
func (p Policy) Check(ap netip.AddrPort) error {
	if p.AllowLocal {
		return nil
	}
	if kind, refused := Refused(ap.Addr()); refused {
		return &AddressError{Addr: ap, Kind: kind, err: p.err(), hint: p.Hint}
	}
	return nil
}

// Refused reports whether a is on the machine or its link, and which kind of address it is.
func Refused(a netip.Addr) (kind string, refused bool) {
	a = a.Unmap().WithZone("")
	for _, r := range refusedPrefixes {
		if r.prefix.Contains(a) {
			return r.kind, true
		}
	}
	return "", false
}

// Control is a net.Dialer Control: it runs after name resolution, on the address about to
// be connected, so no resolver trick gets around it.
func (p Policy) Control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("connect to %s: %w: not an IP address", address, p.err())
	}
	return p.Check(ap)
}

// Dialer returns a net.Dialer that applies p to every address it connects to.
func (p Policy) Dialer() *net.Dialer {
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	if !p.AllowLocal {
		d.Control = p.Control
	}
	return d
}
