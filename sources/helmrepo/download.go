package helmrepo

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/converge-dev/converge/sources/diskcache"
)

// resolveIndex returns c's version in the repository's index: the remembered resolution
// when the index is unchanged (a 304 answer to the validators it was made with), else from
// the index read now.
func (f *Fetcher) resolveIndex(ctx context.Context, hc client, c Chart, base *url.URL, idxKey string, opts FetchOptions) (resolved, error) {
	memo := c.Name + "\x00" + c.Version
	header := http.Header{}
	// The resolution and the validators it goes with are copied under the lock: a 304 is
	// about exactly those, whatever the map holds by the time it arrives.
	f.mu.Lock()
	var known resolved
	conditional := false
	if st := f.indexes[idxKey]; st != nil {
		if r, ok := st.resolved[memo]; ok {
			known, conditional = r, true
			if st.etag != "" {
				header.Set("If-None-Match", st.etag)
			} else {
				header.Set("If-Modified-Since", st.lastModified)
			}
		}
	}
	f.mu.Unlock()
	u := base.ResolveReference(&url.URL{Path: "index.yaml"})
	resp, err := get(ctx, hc, c, "index.yaml", u, true, header)
	if err != nil {
		return resolved{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotModified {
		if conditional {
			return known, nil
		}
		return resolved{}, fmt.Errorf("%s: index.yaml: HTTP 304 to an unconditional request", c)
	}
	versions, err := readIndex(c, resp.Body, opts.MaxIndexSize)
	if err != nil {
		return resolved{}, err
	}
	f.count(1, 0)
	r, err := resolve(versions, c, base)
	if err != nil {
		return resolved{}, err
	}
	f.remember(idxKey, memo, resp.Header, r)
	return r, nil
}

// forget drops what is remembered of index idxKey: the next fetch reads it whole.
func (f *Fetcher) forget(idxKey string) {
	f.mu.Lock()
	delete(f.indexes, idxKey)
	f.mu.Unlock()
}

// remember keeps the index's validators and the resolution made in it; a new index (other
// validators) drops the resolutions made in the old one.
func (f *Fetcher) remember(idxKey, memo string, h http.Header, r resolved) {
	etag, lm := h.Get("ETag"), h.Get("Last-Modified")
	if etag == "" && lm == "" {
		return // nothing to ask with: every fetch reads the index
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.indexes[idxKey]
	if st == nil || st.etag != etag || st.lastModified != lm || len(st.resolved) >= maxResolutions {
		if st == nil && len(f.indexes) >= maxIndexes {
			clear(f.indexes)
		}
		st = &indexState{etag: etag, lastModified: lm, resolved: map[string]resolved{}}
		f.indexes[idxKey] = st
	}
	st.resolved[memo] = r
}

func (f *Fetcher) count(indexes, charts int) {
	f.mu.Lock()
	f.stats.IndexDownloads += indexes
	f.stats.ChartDownloads += charts
	f.mu.Unlock()
}

// download writes r's packaged chart into the cache folder key, checked against the
// index's digest, and returns its hex SHA-256.
func (f *Fetcher) download(ctx context.Context, hc client, c Chart, r resolved, auth bool, key string, opts FetchOptions, readUntil time.Time) (string, error) {
	limit := opts.MaxChartSize
	if opts.CacheQuota > 0 && (limit == 0 || opts.CacheQuota < limit) {
		limit = opts.CacheQuota
	}
	what := "version " + r.version
	resp, err := get(ctx, hc, c, what, r.url, auth, nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s: HTTP %d to an unconditional request", c, what, resp.StatusCode)
	}
	if err := os.MkdirAll(f.cache.Dir(), 0o700); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(f.cache.Dir(), diskcache.TmpPrefix)
	if err != nil {
		return "", err
	}
	sum, err := writeChart(c, what, resp.Body, tmp, limit, r.digest)
	if err == nil {
		err = os.Rename(tmp, f.cache.Path(key))
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
		return "", err
	}
	f.count(0, 1)
	if size, ok := f.cache.Add(key, readUntil, opts.CacheQuota); !ok {
		return "", fmt.Errorf("%s: %s: %w: %d bytes on disk, over the chart cache quota of %d bytes (--chart-cache-quota)", c, what, ErrTooLarge, size, opts.CacheQuota)
	}
	return sum, nil
}

// writeChart writes the chart read from body into dir (ChartFile and its digest), at most
// limit bytes, and checks it against want (hex; "" when the index gives none).
func writeChart(c Chart, what string, body io.Reader, dir string, limit int64, want string) (string, error) {
	out, err := os.OpenFile(filepath.Join(dir, ChartFile), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	_, err = readBounded(c, what, body, io.MultiWriter(out, h), limit, "--max-fetch-size")
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if want != "" && sum != want {
		return "", fmt.Errorf("%s: %s: %w: the archive's SHA-256 is %s, the index says %s (the repository's copy is damaged or was replaced; run helm repo index again)",
			c, what, ErrDigest, sum, want)
	}
	return sum, os.WriteFile(filepath.Join(dir, digestFile), []byte(sum), 0o600)
}
