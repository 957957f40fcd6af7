package git

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"golang.org/x/net/proxy"

	"github.com/converge-dev/converge/sources/netguard"
)

// A Sync's URL is tenant input, so every connection a fetch opens is checked where it is
// dialed, on the resolved address: a name that resolves (or re-resolves, DNS rebinding) to
// a refused address and an HTTP redirect to one are refused alike.
//
// go-git picks its transports from a process-wide table (client.InstallProtocol), so the
// guard is installed there once, and each fetch carries its own policy to it: over HTTP in
// the request's context (which net/http hands to the dialer, redirects included), over SSH
// in a proxy URL of a scheme registered here (go-git's SSH dial takes no context, but
// honours FetchOptions.ProxyOptions through golang.org/x/net/proxy). A connection made
// without a policy (go-git used outside Fetch) gets the strict one, over both.

// dialPolicy is what one fetch may connect to.
type dialPolicy struct {
	// allowLocal also allows the addresses refusal lists (FetchOptions.AllowLocal).
	allowLocal bool
	// budget counts the bytes the fetch reads from the network (FetchOptions.MaxFetchSize);
	// nil means no limit.
	budget *fetchBudget
	// advertisement counts the bytes of HTTP ref advertisements, which go-git reads into
	// memory whole (maxAdvertisement); nil means no limit.
	advertisement *fetchBudget
	// clock is the fetch's deadline and ctx: an SSH connection ends with them (fetchConn);
	// nil outside Fetch.
	clock *fetchClock
}

type dialPolicyKey struct{}

// withDialPolicy returns ctx carrying p for the HTTP transport's dialer.
func withDialPolicy(ctx context.Context, p dialPolicy) context.Context {
	return context.WithValue(ctx, dialPolicyKey{}, p)
}

func dialPolicyFrom(ctx context.Context) dialPolicy {
	p, _ := ctx.Value(dialPolicyKey{}).(dialPolicy)
	return p
}

// sshDialScheme names the proxy URL that carries an SSH fetch's policy to the dialer
// installTransports registers for it.
const sshDialScheme = "converge-dial"

// proxyOptions returns the go-git proxy options that route an SSH fetch through the guard
// with p, and release, which forgets p once the fetch is over. Other protocols get none:
// their guard is in the HTTP transport, and an HTTP proxy URL of this scheme would not work
// there.
func (p dialPolicy) proxyOptions(protocol string) (opts transport.ProxyOptions, release func()) {
	if protocol != "ssh" {
		return transport.ProxyOptions{}, func() {}
	}
	token, release := registerSSH(p)
	return transport.ProxyOptions{URL: sshDialScheme + "://" + token}, release
}

// strictProxy routes an SSH session opened without Fetch's policy through the guard with
// the strict policy (no token is registered under "strict").
var strictProxy = transport.ProxyOptions{URL: sshDialScheme + "://strict"}

// AddressError reports a connection a fetch refused to open: the address is on the
// daemon's machine or its link (see FetchOptions.AllowLocal). It wraps ErrLocalURL.
type AddressError = netguard.AddressError

// guard is the dial guard of a fetch: a refusal is an ErrLocalURL, terminal like a refused
// file:// URL.
func guard(allowLocal bool) netguard.Policy {
	return netguard.Policy{AllowLocal: allowLocal, Err: ErrLocalURL, Hint: "repositories on this machine or its link; the daemon allows them with --allow-local-git"}
}

// checkAddress refuses the addresses the guard refuses.
func checkAddress(ap netip.AddrPort) error {
	return guard(false).Check(ap)
}

// dialer returns the dialer of a policy.
func (p dialPolicy) dialer() *net.Dialer {
	return guard(p.allowLocal).Dialer()
}

var installOnce sync.Once

// installTransports puts the guarded HTTP and SSH transports in go-git's protocol table
// and registers the SSH policy scheme, once per process, before any fetch.
func installTransports() {
	installOnce.Do(func() {
		guarded := githttp.NewClient(&http.Client{Transport: &policyTransport{
			strict: httpTransport(dialPolicy{}),
			local:  httpTransport(dialPolicy{allowLocal: true}),
		}})
		client.InstallProtocol("http", guarded)
		client.InstallProtocol("https", guarded)
		client.InstallProtocol("ssh", sshTransport{gitssh.DefaultClient})
		// git:// is not offered (authMethod refuses it); without a transport no caller of
		// go-git in this process can reach it unguarded either.
		client.InstallProtocol("git", nil)
		proxy.RegisterDialerType(sshDialScheme, func(u *url.URL, _ proxy.Dialer) (proxy.Dialer, error) {
			p := sshPolicy(u.Host)
			// ALL_PROXY and NO_PROXY keep working as go-git's own SSH dial honours them;
			// the guard then checks the proxy's address, and the proxy decides the rest.
			return contextDialer{proxy.FromEnvironmentUsing(p.dialer()), p}, nil
		})
	})
}

// httpTransport is http.DefaultTransport with p's dialer. Each policy has its own
// transport, so a kept-alive connection one policy allowed is never reused by another.
// A fetch's requests carry its ctx, which bounds the whole exchange; the transport's own
// timeouts bound a request made without a deadline.
func httpTransport(p dialPolicy) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = p.dialer().DialContext
	t.TLSHandshakeTimeout = 10 * time.Second
	t.ResponseHeaderTimeout = responseHeaderTimeout
	return t
}

// responseHeaderTimeout bounds the wait for an answer's headers: git servers send them
// before they compute a pack.
const responseHeaderTimeout = time.Minute

// policyTransport sends each request through the transport of the policy in its context.
type policyTransport struct {
	strict, local *http.Transport
}

func (t *policyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	p := dialPolicyFrom(req.Context())
	rt := t.strict
	if p.allowLocal {
		rt = t.local
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	if p.clock != nil {
		p.clock.answered.Store(true)
	}
	// Each bound reads through the one before; closing the outermost closes the answer.
	bound := func(r io.Reader) { resp.Body = readCloser{r, resp.Body} }
	if p.budget != nil {
		bound(budgetReader{resp.Body, p.budget})
	}
	if p.advertisement != nil && strings.HasSuffix(req.URL.Path, "/info/refs") {
		bound(budgetReader{resp.Body, p.advertisement})
	}
	if resp.StatusCode >= http.StatusBadRequest {
		// go-git reads an error answer's whole body into its error message (the Sync's
		// status): a server must not fill the daemon's memory, or a status, that way.
		bound(io.LimitReader(resp.Body, maxErrorBody))
	}
	return resp, nil
}

// maxErrorBody bounds what is read of an HTTP error answer: far more than a git server's
// message ("Repository not found").
const maxErrorBody = 4 << 10

// readCloser is an HTTP answer's body read through a bound, closed as the answer.
type readCloser struct {
	io.Reader
	io.Closer
}

// sshTransport is go-git's SSH transport with the strict policy for an endpoint that
// names no proxy (a session opened without Fetch's ProxyOptions).
type sshTransport struct{ transport.Transport }

func (t sshTransport) NewUploadPackSession(ep *transport.Endpoint, auth transport.AuthMethod) (transport.UploadPackSession, error) {
	return t.Transport.NewUploadPackSession(strictByDefault(ep), auth)
}

func (t sshTransport) NewReceivePackSession(ep *transport.Endpoint, auth transport.AuthMethod) (transport.ReceivePackSession, error) {
	return t.Transport.NewReceivePackSession(strictByDefault(ep), auth)
}

func strictByDefault(ep *transport.Endpoint) *transport.Endpoint {
	if ep.Proxy.URL != "" {
		return ep
	}
	guarded := *ep
	guarded.Proxy = strictProxy
	return &guarded
}

// contextDialer gives go-git's SSH dial the proxy.ContextDialer it requires, ends the
// connection with the fetch (fetchConn) and counts what it reads against the fetch's
// budget.
type contextDialer struct {
	proxy.Dialer
	p dialPolicy
}

func (d contextDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var conn net.Conn
	var err error
	if cd, ok := d.Dialer.(proxy.ContextDialer); ok {
		conn, err = cd.DialContext(ctx, network, address)
	} else {
		conn, err = d.Dial(network, address)
	}
	if err != nil {
		return conn, err
	}
	if d.p.clock != nil {
		if conn, err = newFetchConn(conn, d.p.clock); err != nil {
			return nil, err
		}
	}
	if d.p.budget == nil {
		return conn, nil
	}
	return budgetConn{conn, d.p.budget}, nil
}

// refusedAddress returns the AddressError in err's chain, if any.
func refusedAddress(err error) (*AddressError, bool) {
	var ae *AddressError
	ok := errors.As(err, &ae)
	return ae, ok
}
