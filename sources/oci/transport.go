package oci

import (
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/converge-dev/converge/sources/netguard"
)

// guard is the dial guard of a fetch: a refusal is an ErrLocal.
func guard(allowLocal bool) netguard.Policy {
	return netguard.Policy{AllowLocal: allowLocal, Err: ErrLocal, Hint: "registries on this machine or its link; the daemon allows them with --allow-local-git"}
}

// budget counts the bytes a fetch reads from the registry.
type budget struct {
	url   string
	limit int64 // 0: no limit
	used  atomic.Int64
}

func (b *budget) take(n int) error {
	if b.limit > 0 && b.used.Add(int64(n)) > b.limit {
		return fmt.Errorf("%s: %w: the fetch read more than %d bytes from the registry (--max-fetch-size)", b.url, ErrTooLarge, b.limit)
	}
	return nil
}

// newTransport returns the transport of one fetch: every connection through the dial
// guard (redirects and token endpoints included), the custom CA, and every answer counted
// against b. The caller closes its idle connections when the fetch ends.
func newTransport(opts FetchOptions, a Artifact, b *budget) (*http.Transport, http.RoundTripper, error) {
	tc, err := tlsConfig(a.URL, a.Auth.CA)
	if err != nil {
		return nil, nil, err
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = guard(opts.AllowLocal).Dialer().DialContext
	t.TLSClientConfig = tc
	t.TLSHandshakeTimeout = 10 * time.Second
	t.ResponseHeaderTimeout = time.Minute
	return t, budgetTransport{t, b}, nil
}

// budgetTransport counts every answer's body against a budget.
type budgetTransport struct {
	rt http.RoundTripper
	b  *budget
}

func (t budgetTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.rt.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	resp.Body = &budgetBody{resp.Body, t.b}
	return resp, nil
}

type budgetBody struct {
	io.ReadCloser
	b *budget
}

func (r *budgetBody) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if berr := r.b.take(n); berr != nil {
		return n, berr
	}
	return n, err
}
