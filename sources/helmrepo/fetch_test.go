package helmrepo

import (
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/converge-dev/converge/e2e/chartrepo"
)

const appChart = "../testdata/charts/app" // subcharts, a library chart, CRDs and hooks

func localOptions() FetchOptions {
	o := DefaultFetchOptions()
	o.AllowLocal = true
	return o
}

// TestFetchResolvesVersionConstraints: the highest version matching the constraint wins;
// no constraint skips prereleases, as helm does; an exact prerelease is found.
func TestFetchResolvesVersionConstraints(t *testing.T) {
	repo := chartrepo.Start(t, chartrepo.Options{})
	for _, v := range []string{"1.0.0", "1.1.0", "2.0.0-rc.1"} {
		repo.Add(t, appChart, v)
	}
	f := NewFetcher(t.TempDir())
	for constraint, want := range map[string]string{"": "1.1.0", "~1.0": "1.0.0", "2.0.0-rc.1": "2.0.0-rc.1", ">=1.0.0-0": "2.0.0-rc.1"} {
		res, err := f.Fetch(t.Context(), Chart{Repository: repo.URL, Name: "app", Version: constraint}, localOptions())
		if err != nil {
			t.Fatalf("%q: %v", constraint, err)
		}
		if res.Version != want || !strings.HasPrefix(res.Revision, want+"@sha256:") {
			t.Errorf("%q: version %s, revision %s, want %s", constraint, res.Version, res.Revision, want)
		}
		if _, err := os.Stat(filepath.Join(res.Dir, ChartFile)); err != nil {
			t.Errorf("%q: %v", constraint, err)
		}
	}
}

// TestFetchAsksIndexByETagAndDownloadsChartOnce: an unchanged index answers 304 and the
// cached chart is served without a download; a new version in the index is downloaded.
func TestFetchAsksIndexByETagAndDownloadsChartOnce(t *testing.T) {
	repo := chartrepo.Start(t, chartrepo.Options{})
	first := repo.Add(t, appChart, "1.0.0")
	f := NewFetcher(t.TempDir())
	c := Chart{Repository: repo.URL, Name: "app", Version: "1.x"}
	a, err := f.Fetch(t.Context(), c, localOptions())
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.Fetch(t.Context(), c, localOptions())
	if err != nil {
		t.Fatal(err)
	}
	if a.Revision != b.Revision || a.Dir != b.Dir {
		t.Errorf("second fetch: %s in %s, want %s in %s", b.Revision, b.Dir, a.Revision, a.Dir)
	}
	if n, m := repo.Downloads("index.yaml"), repo.Downloads(first); n != 1 || m != 1 {
		t.Errorf("index.yaml read %d times and the chart %d times, want once each (304 the second time)", n, m)
	}
	second := repo.Add(t, appChart, "1.2.0")
	res, err := f.Fetch(t.Context(), c, localOptions())
	if err != nil {
		t.Fatal(err)
	}
	if res.Version != "1.2.0" || repo.Downloads(second) != 1 || repo.Downloads("index.yaml") != 2 {
		t.Errorf("after a new version: %s, index read %d times, new chart %d times", res.Version, repo.Downloads("index.yaml"), repo.Downloads(second))
	}
}

// TestFetchFailures: each failure names the chart and is terminal or not as it should be,
// and nothing is cached for it.
func TestFetchFailures(t *testing.T) {
	repo := chartrepo.Start(t, chartrepo.Options{Username: "u", Password: "p"})
	file := repo.Add(t, appChart, "1.0.0")
	auth := Auth{Username: "u", Password: "p"}
	cases := []struct {
		name     string
		c        Chart
		opts     func(*FetchOptions)
		want     error
		terminal bool
	}{
		{"unknown chart", Chart{Repository: repo.URL, Name: "nope", Auth: auth}, nil, ErrNotFound, false},
		{"no matching version", Chart{Repository: repo.URL, Name: "app", Version: ">=3", Auth: auth}, nil, ErrNotFound, false},
		{"bad constraint", Chart{Repository: repo.URL, Name: "app", Version: "one point oh", Auth: auth}, nil, ErrInvalid, true},
		{"wrong password", Chart{Repository: repo.URL, Name: "app", Auth: Auth{Username: "u", Password: "x"}}, nil, ErrAuth, false},
		{"no credentials", Chart{Repository: repo.URL, Name: "app"}, nil, ErrAuth, false},
		{"not a repository", Chart{Repository: repo.URL + "/nothing", Name: "app", Auth: auth}, nil, ErrNotFound, false},
		{"index too large", Chart{Repository: repo.URL, Name: "app", Auth: auth}, func(o *FetchOptions) { o.MaxIndexSize = 100 }, ErrTooLarge, true},
		{"chart too large", Chart{Repository: repo.URL, Name: "app", Auth: auth}, func(o *FetchOptions) { o.MaxChartSize = 100 }, ErrTooLarge, true},
		{"local refused", Chart{Repository: repo.URL, Name: "app", Auth: auth}, func(o *FetchOptions) { o.AllowLocal = false }, ErrLocal, true},
		{"credentials in the URL", Chart{Repository: strings.Replace(repo.URL, "http://", "http://u:p@", 1), Name: "app"}, nil, ErrInvalid, true},
		{"not http", Chart{Repository: "ftp://example.com/charts", Name: "app"}, nil, ErrInvalid, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFetcher(t.TempDir())
			opts := localOptions()
			if tc.opts != nil {
				tc.opts(&opts)
			}
			_, err := f.Fetch(t.Context(), tc.c, opts)
			if !errors.Is(err, tc.want) || IsTerminal(err) != tc.terminal {
				t.Fatalf("%v, want %v (terminal %v)", err, tc.want, tc.terminal)
			}
			if strings.Contains(err.Error(), "u:p@") || !strings.Contains(err.Error(), "chart ") {
				t.Errorf("message %q: want it to name the chart, without credentials", err)
			}
			if n := f.CacheBytes(); n != 0 {
				t.Errorf("%d bytes cached after a failed fetch", n)
			}
		})
	}
	t.Run("damaged archive", func(t *testing.T) {
		repo.WriteFile(t, file, []byte("not the indexed archive"))
		_, err := NewFetcher(t.TempDir()).Fetch(t.Context(), Chart{Repository: repo.URL, Name: "app", Auth: auth}, localOptions())
		if !errors.Is(err, ErrDigest) || !IsTerminal(err) {
			t.Fatalf("%v, want ErrDigest", err)
		}
	})
}

// TestFetchCredentialsStayWithTheRepository: a chart URL on another host gets no
// credentials unless PassCredentials; over HTTPS the repository's CA is trusted.
func TestFetchCredentialsStayWithTheRepository(t *testing.T) {
	charts := chartrepo.Start(t, chartrepo.Options{TLS: true})
	file := charts.Add(t, appChart, "1.0.0")
	index := chartrepo.Start(t, chartrepo.Options{TLS: true})
	data, err := os.ReadFile(filepath.Join(charts.Dir, "index.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The index of one repository lists the archive of the other, by absolute URL.
	index.WriteFile(t, "index.yaml", []byte(strings.ReplaceAll(string(data), "- "+file, "- "+charts.URL+"/"+file)))
	ca := append(charts.CA(), index.CA()...)
	for _, pass := range []bool{false, true} {
		f := NewFetcher(t.TempDir())
		_, err := f.Fetch(t.Context(), Chart{Repository: index.URL, Name: "app", Auth: Auth{Username: "u", Password: "p", CA: ca, PassCredentials: pass}}, localOptions())
		if err != nil {
			t.Fatal(err)
		}
		sent := false
		for _, a := range charts.Authorizations() {
			sent = sent || strings.Contains(a, "Basic ")
		}
		if sent != pass {
			t.Errorf("PassCredentials %v: credentials sent to the other host: %v (%q)", pass, sent, charts.Authorizations())
		}
	}
	if _, err := NewFetcher(t.TempDir()).Fetch(t.Context(), Chart{Repository: index.URL, Name: "app"}, localOptions()); err == nil {
		t.Error("an HTTPS repository with an unknown CA was trusted")
	}
}

// TestFetch304AfterTheMemoIsDropped: a conditional index request is in flight while the
// Fetcher drops what it remembers (maxIndexes other repositories remembered since); its 304
// still answers with the resolution it was asked about, and other fetches go on (without
// it: a nil dereference with the Fetcher's lock held stopped every later fetch).
func TestFetch304AfterTheMemoIsDropped(t *testing.T) {
	release, asked := make(chan struct{}), make(chan struct{})
	var once atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/index.yaml") {
			fmt.Fprint(w, "archive")
			return
		}
		if r.Header.Get("If-None-Match") == `"e"` && strings.HasPrefix(r.URL.Path, "/r0/") {
			if once.CompareAndSwap(false, true) {
				close(asked)
			}
			<-release
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("ETag", `"e"`)
		fmt.Fprint(w, "apiVersion: v1\nentries:\n  app:\n  - version: 1.0.0\n    urls:\n    - app-1.0.0.tgz\n")
	}))
	t.Cleanup(srv.Close)
	f := NewFetcher(t.TempDir())
	c := Chart{Repository: srv.URL + "/r0", Name: "app"}
	if _, err := f.Fetch(t.Context(), c, localOptions()); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := f.Fetch(t.Context(), c, localOptions())
		done <- err
	}()
	<-asked
	for i := 1; i <= maxIndexes; i++ {
		if _, err := f.Fetch(t.Context(), Chart{Repository: fmt.Sprintf("%s/r%d", srv.URL, i), Name: "app"}, localOptions()); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	if err := <-done; err != nil {
		t.Errorf("the fetch answered 304: %v", err)
	}
	if _, err := f.Fetch(t.Context(), Chart{Repository: srv.URL + "/r5000", Name: "app"}, localOptions()); err != nil {
		t.Errorf("a later fetch: %v", err)
	}
}

// TestFetchRedirectKeepsCredentialsAtTheOrigin: an index.yaml redirected to another port of
// the same host gets no credentials there, and a redirect from https to http is refused
// (without it: Go's client sent the Authorization header to the other port).
func TestFetchRedirectKeepsCredentialsAtTheOrigin(t *testing.T) {
	var leaked atomic.Value
	leaked.Store("")
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaked.Store(r.Header.Get("Authorization"))
		fmt.Fprint(w, "apiVersion: v1\nentries: {}\n")
	}))
	t.Cleanup(other.Close)
	redirect := func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/index.yaml", http.StatusFound)
	}
	repo := httptest.NewServer(http.HandlerFunc(redirect))
	t.Cleanup(repo.Close)
	auth := Auth{Username: "tenant", Password: "s3cret"}
	_, _ = NewFetcher(t.TempDir()).Fetch(t.Context(), Chart{Repository: repo.URL, Name: "app", Auth: auth}, localOptions())
	if a := leaked.Load().(string); a != "" {
		t.Errorf("the other port received Authorization %q", a)
	}
	secure := httptest.NewTLSServer(http.HandlerFunc(redirect))
	t.Cleanup(secure.Close)
	auth.CA = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: secure.Certificate().Raw})
	_, err := NewFetcher(t.TempDir()).Fetch(t.Context(), Chart{Repository: secure.URL, Name: "app", Auth: auth}, localOptions())
	if err == nil || !strings.Contains(err.Error(), "redirect from https to http") {
		t.Errorf("https to http redirect: %v", err)
	}
}
