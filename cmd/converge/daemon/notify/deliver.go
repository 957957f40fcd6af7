package notify

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"

	"github.com/converge-dev/converge/sources/netguard"
)

// ErrLocal is wrapped by a refused connection: the address resolved to the daemon's
// machine, its link, a cloud metadata service or a denied prefix.
var ErrLocal = errors.New("notification address refused")

// errRedirect is returned for any redirect: credentials must not follow one.
var errRedirect = errors.New("redirect refused: set the provider address to the final URL")

// maxErrorBody is how much of a refusal's body is read for its error message; the rest is
// never read.
const maxErrorBody = 4 << 10

// StatusError is a receiver's answer outside 2xx.
type StatusError struct {
	// Code is the HTTP status code.
	Code int
	// Body is the start of the answer, secrets removed.
	Body string
}

func (e *StatusError) Error() string {
	if e.Body == "" {
		return fmt.Sprintf("status %d", e.Code)
	}
	return fmt.Sprintf("status %d: %s", e.Code, e.Body)
}

// Permanent marks err as final: a delivery whose Resolve or attempt met it is not retried.
func Permanent(err error) error { return permanent{err} }

type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// retryable reports whether another attempt may succeed: network errors, timeouts, 408,
// 429 and 5xx. A certificate that does not verify is final, and so are a Permanent error, a
// refused address or redirect, an invalid provider, a revision with no commit and other 4xx
// answers.
func retryable(err error) bool {
	var se *StatusError
	var ce *tls.CertificateVerificationError
	var pe permanent
	switch {
	case errors.As(err, &ce), errors.As(err, &pe):
		return false
	case errors.Is(err, ErrInvalid), errors.Is(err, ErrNoCommit), errors.Is(err, ErrLocal), errors.Is(err, errRedirect):
		return false
	case errors.As(err, &se):
		return se.Code == http.StatusRequestTimeout || se.Code == http.StatusTooManyRequests || se.Code >= 500
	}
	return true
}

// guard is the dial check: netguard's refusals, then the caller's denied prefixes.
type guard struct {
	policy netguard.Policy
	deny   []netip.Prefix
}

func (g guard) control(network, address string, c syscall.RawConn) error {
	if err := g.policy.Control(network, address, c); err != nil {
		return err
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("connect to %s: %w: not an IP address", address, ErrLocal)
	}
	for _, p := range g.deny {
		if p.Contains(ap.Addr().Unmap()) {
			return fmt.Errorf("connect to %s: %w: in denied prefix %s", ap, ErrLocal, p)
		}
	}
	return nil
}

// client returns the HTTP client for one delivery: the dial guard, no proxy, no redirect,
// the provider's CA bundle as its only roots when set.
func (d *Dispatcher) client(t *target) (*http.Client, error) {
	g := guard{policy: netguard.Policy{AllowLocal: d.opts.AllowLocal, Err: ErrLocal,
		Hint: "the daemon's machine, its link and metadata services are never notified"}, deny: d.opts.Deny}
	dialer := &net.Dialer{Timeout: d.opts.AttemptTimeout, Control: g.control}
	tr := &http.Transport{
		Proxy:               nil, // a proxy would dial for us, past the guard
		DialContext:         dialer.DialContext,
		TLSHandshakeTimeout: d.opts.AttemptTimeout,
		MaxIdleConns:        1,
		ForceAttemptHTTP2:   true,
	}
	if len(t.CABundle) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(t.CABundle) {
			return nil, t.invalid("CA bundle holds no PEM certificate")
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return errRedirect }}, nil
}

// attempt sends r once under the attempt timeout. Its error names the method and the
// address's origin only, with every secret of t removed.
func (d *Dispatcher) attempt(ctx context.Context, c *http.Client, t *target, r *request) error {
	ctx, cancel := context.WithTimeout(ctx, d.opts.AttemptTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url.String(), bytes.NewReader(r.body))
	if err != nil {
		return t.redact(fmt.Errorf("POST %s: %w", origin(t.Address), err))
	}
	req.Header = r.header.Clone()
	req.Header.Set("User-Agent", "converge-notify")
	resp, err := c.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error quotes the whole URL, path and query included
		}
		return t.redact(fmt.Errorf("POST %s: %w", origin(t.Address), err))
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		return nil
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	body := strings.Join(strings.Fields(strings.ToValidUTF8(string(b), "?")), " ")
	return t.redact(fmt.Errorf("POST %s: %w", origin(t.Address), &StatusError{Code: resp.StatusCode, Body: truncate(t.scrub(body), 512)}))
}

// secrets are the strings of t no error may show: the credentials (basic auth as sent), and the address's path
// and query (a webhook URL is a credential; a repository path is not, but scrubbing it
// costs nothing).
func (t *target) secrets() []string {
	var out []string
	basic := ""
	if t.Username != "" || t.Password != "" {
		basic = base64.StdEncoding.EncodeToString([]byte(t.Username + ":" + t.Password))
	}
	for _, s := range []string{t.Token, string(t.HMACKey), t.Password, basic} {
		if len(s) >= 4 {
			out = append(out, s)
		}
	}
	if t.Type != GitHub && t.Type != GitLab && t.Type != Gitea {
		if p := strings.Trim(t.url.EscapedPath(), "/"); len(p) >= 4 {
			out = append(out, p, t.url.Path)
		}
		if len(t.url.RawQuery) >= 4 {
			out = append(out, t.url.RawQuery)
		}
	}
	return out
}

// scrub replaces every secret of t in s.
func (t *target) scrub(s string) string {
	for _, sec := range t.secrets() {
		s = strings.ReplaceAll(s, sec, "[redacted]")
	}
	return s
}

// redactedError shows a scrubbed message and still unwraps to the cause, so errors.Is and
// errors.As keep working.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

func (t *target) redact(err error) error {
	return &redactedError{msg: t.scrub(err.Error()), err: err}
}
