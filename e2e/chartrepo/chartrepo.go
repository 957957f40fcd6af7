// Package chartrepo starts a real HTTP Helm repository for tests: charts packaged and
// indexed by the Helm library into a folder, served over HTTP (or HTTPS) with ETags, as a
// static chart repository (GitHub Pages, S3, ChartMuseum's storage) serves them.
package chartrepo

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"helm.sh/helm/v3/pkg/repo"
)

// Options of a repository.
type Options struct {
	// Username and Password, when set, are required (HTTP basic auth) for every file.
	Username, Password string
	// TLS serves HTTPS with a test certificate (Repo.CA).
	TLS bool
}

// Repo is a running chart repository.
type Repo struct {
	// URL is the repository's URL, without index.yaml.
	URL string
	// Dir is the folder it serves.
	Dir  string
	srv  *httptest.Server
	mu   sync.Mutex
	hits map[string]int // answers with a body, by path
	auth []string       // Authorization headers seen, by path
}

// Start serves an empty repository until the test ends.
func Start(t testing.TB, opts Options) *Repo {
	t.Helper()
	r := &Repo{Dir: t.TempDir(), hits: map[string]int{}}
	h := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { r.serve(w, req, opts) })
	if opts.TLS {
		r.srv = httptest.NewTLSServer(h)
	} else {
		r.srv = httptest.NewServer(h)
	}
	t.Cleanup(r.srv.Close)
	r.URL = r.srv.URL + "/charts"
	r.Index(t)
	return r
}

// CA returns the PEM certificate of an HTTPS repository.
func (r *Repo) CA() []byte {
	return pemCert(r.srv.Certificate().Raw)
}

func (r *Repo) serve(w http.ResponseWriter, req *http.Request, opts Options) {
	r.mu.Lock()
	r.auth = append(r.auth, req.URL.Path+" "+req.Header.Get("Authorization"))
	r.mu.Unlock()
	if opts.Username != "" {
		if u, p, ok := req.BasicAuth(); !ok || u != opts.Username || p != opts.Password {
			w.Header().Set("WWW-Authenticate", `Basic realm="charts"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
	}
	name, ok := strings.CutPrefix(req.URL.Path, "/charts/")
	if !ok || strings.Contains(name, "/") {
		http.NotFound(w, req)
		return
	}
	f, err := os.Open(filepath.Join(r.Dir, name))
	if err != nil {
		http.NotFound(w, req)
		return
	}
	defer f.Close()
	data, err := os.ReadFile(f.Name())
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	sum := sha256.Sum256(data)
	w.Header().Set("ETag", `"`+hex.EncodeToString(sum[:8])+`"`)
	if req.Header.Get("If-None-Match") != w.Header().Get("ETag") {
		r.mu.Lock()
		r.hits[name]++
		r.mu.Unlock()
	}
	info, _ := f.Stat()
	http.ServeContent(w, req, name, info.ModTime(), f)
}

// Downloads returns how many answers with a body the repository sent for file name
// ("index.yaml", "app-1.0.0.tgz").
func (r *Repo) Downloads(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hits[name]
}

// Authorizations returns "path header" of every request, in order.
func (r *Repo) Authorizations() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.auth...)
}

// Add packages the chart folder dir at version (its Chart.yaml's when "") into the
// repository, indexes it again, and returns the archive's file name.
func (r *Repo) Add(t testing.TB, dir, version string) string {
	t.Helper()
	file := pack(t, dir, version, r.Dir)
	r.Index(t)
	return filepath.Base(file)
}

// Index writes index.yaml for the archives of the folder, with URLs relative to the
// repository, as `helm repo index` without --url.
func (r *Repo) Index(t testing.TB) {
	t.Helper()
	idx, err := repo.IndexDirectory(r.Dir, "")
	if err != nil {
		t.Fatal(err)
	}
	idx.SortEntries()
	if err := idx.WriteFile(filepath.Join(r.Dir, "index.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// WriteFile writes a file of the repository as is (a hand-made index, a damaged archive).
func (r *Repo) WriteFile(t testing.TB, name string, data []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(r.Dir, name), data, 0o644); err != nil {
		t.Fatal(err)
	}
}
