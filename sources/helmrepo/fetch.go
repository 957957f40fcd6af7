package helmrepo

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/converge-dev/converge/sources/cachekey"
	"github.com/converge-dev/converge/sources/diskcache"
	"github.com/converge-dev/converge/sources/netguard"
)

// Fetcher fetches charts into a cache directory. It is safe for concurrent use.
type Fetcher struct {
	cache *diskcache.Cache
	// keyer names what is remembered of a repository (its index's validators and
	// resolutions, its charts' folders) by its URL and the credentials it was read with:
	// nothing learnt with one tenant's credentials is served to another's.
	keyer *cachekey.Keyer

	mu      sync.Mutex
	indexes map[string]*indexState
	stats   Stats
}

// indexState is what is remembered of one repository's index between fetches: its
// validators and the resolutions made in it. Not the index itself: a 304 answer with a
// resolution not remembered asks for the whole index again.
type indexState struct {
	etag, lastModified string
	resolved           map[string]resolved // by chart name and constraint
}

// Bounds of what a Fetcher remembers: past them, it is dropped (the next fetch pays one
// full index download).
const (
	maxIndexes     = 1024
	maxResolutions = 256
)

// NewFetcher returns a Fetcher that keeps charts under cacheDir.
func NewFetcher(cacheDir string) *Fetcher {
	return &Fetcher{cache: diskcache.New(cacheDir), keyer: cachekey.New(cacheDir), indexes: map[string]*indexState{}}
}

// Stats returns what the Fetcher downloaded.
func (f *Fetcher) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}

// CacheBytes returns the bytes of the charts the cache holds.
func (f *Fetcher) CacheBytes() int64 { return f.cache.Total() }

// Fetch resolves c in its repository's index and returns the folder holding its packaged
// chart (ChartFile), downloaded unless cached. The folder stays on disk at least until
// ctx's deadline, so a caller that reads it under the same ctx never sees it removed.
func (f *Fetcher) Fetch(ctx context.Context, c Chart, opts FetchOptions) (*Result, error) {
	readUntil, _ := ctx.Deadline()
	if opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.Timeout)
		defer cancel()
	}
	res, err := f.fetch(ctx, c, opts, readUntil)
	if err != nil && opts.Timeout > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) && !IsTerminal(err) {
		return nil, fmt.Errorf("%s: not finished within %v (--fetch-timeout): check that the repository is reachable and answers: %w", c, opts.Timeout, err)
	}
	return res, err
}

func (f *Fetcher) fetch(ctx context.Context, c Chart, opts FetchOptions, readUntil time.Time) (*Result, error) {
	base, err := parseRepository(c)
	if err != nil {
		return nil, err
	}
	client, err := newClient(c, opts)
	if err != nil {
		return nil, err
	}
	defer client.CloseIdleConnections()
	idxKey, err := f.keyer.Name([]byte("index"), []byte(base.String()), []byte(c.Auth.Username), []byte(c.Auth.Password), c.Auth.CA)
	if err != nil {
		return nil, err
	}
	r, err := f.resolveIndex(ctx, client, c, base, idxKey, opts)
	if err != nil {
		return nil, err
	}
	sendAuth := c.Auth.PassCredentials || sameOrigin(base, r.url)
	key, err := f.keyer.Name([]byte("chart"), []byte(r.url.String()), []byte(strconv.FormatBool(sendAuth)), []byte(c.Auth.Username),
		[]byte(c.Auth.Password), c.Auth.CA, []byte(r.version), []byte(r.digest))
	if err != nil {
		return nil, err
	}
	unlock, err := f.cache.Lock(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("%s: waiting for another fetch of the chart: %w", c, err)
	}
	defer unlock()
	res := &Result{Dir: f.cache.Path(key), Version: r.version}
	if f.cache.Lookup(key, readUntil) {
		sum, err := readDigest(res.Dir)
		if err == nil {
			res.Digest, res.Revision = "sha256:"+sum, r.version+"@sha256:"+sum
			return res, nil
		}
	}
	sum, err := f.download(ctx, client, c, r, sendAuth, key, opts, readUntil)
	if errors.Is(err, ErrDigest) {
		// The remembered resolution may be older than the archive: read the index again.
		f.forget(idxKey)
	}
	if err != nil {
		return nil, err
	}
	res.Digest, res.Revision = "sha256:"+sum, r.version+"@sha256:"+sum
	return res, nil
}

// digestFile holds the hex SHA-256 of the cached chart beside it.
const digestFile = "chart.sha256"

func readDigest(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, digestFile))
	if err != nil || !isHex64(string(b)) {
		return "", fmt.Errorf("cached chart without its digest: %v", err)
	}
	return string(b), nil
}

// sameOrigin reports whether u is on a's scheme, host and port.
func sameOrigin(a, u *url.URL) bool {
	return a.Scheme == u.Scheme && a.Host == u.Host
}

// client is an http.Client through the dial guard, trusting the CA given, that sends the
// credentials only where asked.
type client struct {
	*http.Client
	t *http.Transport
}

func (c client) CloseIdleConnections() { c.t.CloseIdleConnections() }

func newClient(c Chart, opts FetchOptions) (client, error) {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil // the dial guard judges the address a request reaches, not a proxy's
	t.DialContext = netguard.Policy{AllowLocal: opts.AllowLocal, Err: ErrLocal,
		Hint: "chart repositories on this machine or its link; the daemon allows them with --allow-local-git"}.Dialer().DialContext
	t.TLSHandshakeTimeout = 10 * time.Second
	t.ResponseHeaderTimeout = time.Minute
	if len(c.Auth.CA) > 0 {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(c.Auth.CA) {
			return client{}, fmt.Errorf("%s: %w: ca.crt holds no PEM certificate", c, ErrInvalid)
		}
		t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	hc := &http.Client{Transport: t, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= 5 {
			return errors.New("more than 5 redirects")
		}
		if via[0].URL.Scheme == "https" && req.URL.Scheme != "https" {
			return fmt.Errorf("redirect from https to %s refused", redact(req.URL.String()))
		}
		// Go keeps the Authorization header on a redirect to the same host name on another
		// port or scheme, and to a subdomain: the credentials stay with the origin they were
		// sent to unless PassCredentials.
		if !c.Auth.PassCredentials && !sameOrigin(via[0].URL, req.URL) {
			req.Header.Del("Authorization")
		}
		return nil
	}}
	return client{hc, t}, nil
}

// get sends a GET of u with the headers given and basic auth when auth, and classifies a
// failed answer. The caller closes the body of a 200 or 304 answer.
func get(ctx context.Context, hc client, c Chart, what string, u *url.URL, auth bool, header http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w: %v", c, what, ErrInvalid, err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if auth && (c.Auth.Username != "" || c.Auth.Password != "") {
		req.SetBasicAuth(c.Auth.Username, c.Auth.Password)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", c, what, err)
	}
	switch {
	case resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusNotModified:
		return resp, nil
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		resp.Body.Close()
		return nil, fmt.Errorf("%s: %s: %w (HTTP %d): check the Secret's username and password", c, what, ErrAuth, resp.StatusCode)
	case resp.StatusCode == http.StatusNotFound:
		resp.Body.Close()
		return nil, fmt.Errorf("%s: %s: %w (HTTP 404 for %s)", c, what, ErrNotFound, redact(u.String()))
	}
	resp.Body.Close()
	return nil, fmt.Errorf("%s: %s: HTTP %d", c, what, resp.StatusCode)
}

// readBounded reads at most limit bytes of r (0: no limit), or ErrTooLarge naming flag.
func readBounded(c Chart, what string, r io.Reader, w io.Writer, limit int64, flag string) (int64, error) {
	if limit > 0 {
		r = io.LimitReader(r, limit+1)
	}
	n, err := io.Copy(w, r)
	if err != nil {
		return n, fmt.Errorf("%s: %s: %w", c, what, err)
	}
	if limit > 0 && n > limit {
		return n, fmt.Errorf("%s: %s: %w: more than %d bytes (%s)", c, what, ErrTooLarge, limit, flag)
	}
	return n, nil
}
