// Package helmrepo fetches charts from HTTP Helm repositories (an index.yaml and the
// packaged charts it lists), the way `helm pull --repo` does, bounded as every source
// fetch is: each connection through the dial guard (sources/netguard), every answer within
// a byte limit, the whole fetch within a deadline.
//
// The index is asked on every fetch, conditionally (If-None-Match with its ETag,
// If-Modified-Since with its Last-Modified): an unchanged repository answers 304 with no
// body, and the resolution of a chart and version constraint in that index is remembered.
// A chart is downloaded once per repository, credentials, version and digest: its archive
// is checked against the index's digest and kept whole (chart.tgz) in a cache folder under
// a quota (sources/diskcache), for the render to inflate within its own limits.
package helmrepo

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// ChartFile is the name of the packaged chart in a fetched folder.
const ChartFile = "chart.tgz"

// Chart names a chart of an HTTP Helm repository.
type Chart struct {
	// Repository is the repository's URL (https:// or http://), without index.yaml.
	Repository string
	// Name is the chart's name in the index.
	Name string
	// Version is a Masterminds semver constraint ("6.5.4", ">=6.0.0 <7", "6.x"); the
	// highest matching version wins. Empty: the highest version without a prerelease, as
	// helm's default.
	Version string
	// Auth are the repository's credentials.
	Auth Auth
}

// Auth holds HTTP basic credentials and a CA, as the Secrets of Flux's HelmRepository.
type Auth struct {
	Username, Password string
	// CA is a PEM bundle trusted besides the system roots for HTTPS.
	CA []byte
	// PassCredentials sends the credentials to a chart URL on another host than the
	// repository's as well (helm --pass-credentials). Without it they go to the
	// repository's scheme, host and port only.
	PassCredentials bool
}

// String describes the chart for messages, without credentials.
func (c Chart) String() string {
	v := c.Version
	if v == "" {
		v = "latest"
	}
	return fmt.Sprintf("chart %s %s of %s", c.Name, v, redact(c.Repository))
}

// redact drops user information from a URL for messages.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	u.User = nil
	return u.String()
}

// FetchOptions are per-call settings of Fetch.
type FetchOptions struct {
	// Timeout bounds the whole fetch: the index, the chart and writing it.
	Timeout time.Duration
	// AllowLocal allows repositories on this machine or its link (see sources/netguard).
	AllowLocal bool
	// MaxIndexSize bounds the index.yaml read (and parsed in memory). Zero: no limit.
	MaxIndexSize int64
	// MaxChartSize bounds the packaged chart downloaded. Zero: no limit.
	MaxChartSize int64
	// CacheQuota bounds the disk the cache's indexes and charts take. Zero: no limit.
	CacheQuota int64
}

// DefaultFetchOptions returns a two-minute timeout, an index of at most 50 MiB (Flux's
// default), a chart of at most 64 MiB, and local repositories refused.
func DefaultFetchOptions() FetchOptions {
	return FetchOptions{Timeout: 2 * time.Minute, MaxIndexSize: 50 << 20, MaxChartSize: 64 << 20}
}

// Result is a fetched chart.
type Result struct {
	// Dir is the cache folder holding ChartFile.
	Dir string
	// Version is the chart version the constraint resolved to.
	Version string
	// Digest is "sha256:<hex>" of the packaged chart.
	Digest string
	// Revision reads "<version>@sha256:<hex>".
	Revision string
}

// Stats counts what a Fetcher did.
type Stats struct {
	// IndexDownloads counts index.yaml bodies read (a 304 answer reads none).
	IndexDownloads int
	// ChartDownloads counts packaged charts downloaded.
	ChartDownloads int
}

var (
	// ErrNotFound reports a repository, chart or version the repository does not hold.
	ErrNotFound = errors.New("chart not found")
	// ErrAuth reports credentials the repository refused.
	ErrAuth = errors.New("chart repository refused the credentials")
	// ErrInvalid reports a malformed URL, constraint or index: the spec or the repository
	// must change.
	ErrInvalid = errors.New("invalid chart reference")
	// ErrDigest reports a chart whose bytes do not match the index's digest.
	ErrDigest = errors.New("chart digest mismatch")
	// ErrTooLarge reports an index or chart over a limit of FetchOptions.
	ErrTooLarge = errors.New("chart repository answer too large")
	// ErrLocal reports a connection to an address on this machine or its link, refused
	// without AllowLocal.
	ErrLocal = errors.New("local chart repository not allowed")
)

// IsTerminal reports whether a Fetch error stays until the spec or the repository
// changes, as opposed to a network or server failure worth retrying.
func IsTerminal(err error) bool {
	for _, e := range []error{ErrInvalid, ErrDigest, ErrTooLarge, ErrLocal} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// parseRepository checks a repository URL: http or https, a host, no query or fragment.
func parseRepository(c Chart) (*url.URL, error) {
	u, err := url.Parse(c.Repository)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%s: %w: want an http(s):// repository URL without query", redact(c.Repository), ErrInvalid)
	}
	if u.User != nil {
		return nil, fmt.Errorf("%s: %w: credentials belong in a Secret, not in the URL", redact(c.Repository), ErrInvalid)
	}
	if c.Name == "" || strings.ContainsAny(c.Name, "/\\") || c.Name == "." || c.Name == ".." {
		return nil, fmt.Errorf("%s: %w: chart name %q", redact(c.Repository), ErrInvalid, c.Name)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/"
	return u, nil
}
