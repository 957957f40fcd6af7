package git

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gogit "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/google/go-cmp/cmp"
)

// TestFetchCachePerCredentials: what one Sync's credentials fetched, a Sync with no
// credentials or wrong ones cannot read through the shared Fetcher, by branch or by naming
// the exact commit that is cached. Before the cache was keyed by credentials, the exact
// commit was served from A's cache with no request at all.
func TestFetchCachePerCredentials(t *testing.T) {
	r := newTestRepo(t)
	head := r.commit("private", map[string]string{"secret.yaml": "private\n"})
	r.push()
	creds := &httpCreds{user: "alice", password: "s3cret"}
	url, log := serveHTTP(t, r.root, creds)
	f := NewFetcher(t.TempDir())
	alice := Auth{Username: "alice", Password: "s3cret"}

	co := mustFetch(t, f, Repository{URL: url, Ref: Ref{Branch: "main"}, Auth: alice})
	if diff := cmp.Diff("private\n", readFile(t, co.Dir, "secret.yaml")); diff != "" {
		t.Fatalf("secret.yaml (-want +got):\n%s", diff)
	}
	for _, tenant := range []struct {
		name string
		auth Auth
	}{
		{name: "no credentials"},
		{name: "wrong password", auth: Auth{Username: "alice", Password: "guess"}},
		{name: "other token", auth: Auth{BearerToken: "t0ken"}},
	} {
		for _, ref := range []Ref{{Branch: "main"}, {Commit: head}, {Branch: "main", Commit: head}} {
			t.Run(tenant.name+" "+ref.String(), func(t *testing.T) {
				co, err := fetch(t, f, Repository{URL: url, Ref: ref, Auth: tenant.auth})
				if err == nil {
					t.Fatalf("Fetch served %s (%s) to a tenant without the credentials", co.Revision, co.Dir)
				}
				if !errors.Is(err, ErrAuth) {
					t.Errorf("Fetch error %v, want ErrAuth", err)
				}
			})
		}
	}

	// The same credentials share the cache: an exact commit costs one ref advertisement.
	log.take()
	before := f.Stats()
	mustFetch(t, f, Repository{URL: url, Ref: Ref{Commit: head}, Auth: alice})
	if diff := cmp.Diff(Stats{Lookups: before.Lookups + 1, Transfers: before.Transfers}, f.Stats()); diff != "" {
		t.Errorf("stats of a cached commit (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"GET /repo.git/info/refs"}, log.take()); diff != "" {
		t.Errorf("requests of a cached commit (-want +got):\n%s", diff)
	}

	// Credentials the remote no longer accepts cannot read the cached commit either.
	creds.revoked.Store(true)
	if co, err := fetch(t, f, Repository{URL: url, Ref: Ref{Commit: head}, Auth: alice}); !errors.Is(err, ErrAuth) {
		t.Errorf("Fetch with revoked credentials = %v, %v; want ErrAuth", co, err)
	}
}

// TestFetchLocalRefused: local paths and file:// URLs are refused unless allowed, and a URL
// into the fetcher's cache is refused even then. Without it, both were fetched.
func TestFetchLocalRefused(t *testing.T) {
	r := newTestRepo(t)
	r.commit("one", map[string]string{"v.txt": "one"})
	r.push()
	url, _ := serveHTTP(t, r.root, &httpCreds{user: "alice", password: "s3cret"})
	cacheDir := t.TempDir()
	f := NewFetcher(cacheDir)
	mustFetch(t, f, Repository{URL: url, Ref: Ref{Branch: "main"}, Auth: Auth{Username: "alice", Password: "s3cret"}})
	cached, _ := filepath.Glob(filepath.Join(cacheDir, "*", "shallow.git"))
	if len(cached) != 1 {
		t.Fatalf("cached repositories %v, want one", cached)
	}
	rel, err := filepath.Rel(mustGetwd(t), r.bare)
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name       string
		url        string
		allowLocal bool
		wantErr    string // empty: the fetch succeeds
	}{
		{name: "file url", url: "file://" + r.bare, wantErr: "file:// URLs and local paths are for the CLI"},
		{name: "absolute path", url: r.bare, wantErr: "file:// URLs and local paths are for the CLI"},
		{name: "relative path", url: rel, wantErr: "file:// URLs and local paths are for the CLI"},
		{name: "file url allowed", url: "file://" + r.bare, allowLocal: true},
		{name: "path allowed", url: r.bare, allowLocal: true},
		{name: "cache by file url", url: "file://" + cached[0], allowLocal: true, wantErr: "points into the git cache"},
		{name: "cache by path", url: cached[0], allowLocal: true, wantErr: "points into the git cache"},
		{name: "cache by path with dots", url: filepath.Join(cacheDir, "x", "..", filepath.Base(filepath.Dir(cached[0])), "shallow.git"), allowLocal: true, wantErr: "points into the git cache"},
		{name: "cache not allowed", url: "file://" + cached[0], wantErr: "file:// URLs and local paths are for the CLI"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := DefaultFetchOptions()
			opts.AllowLocal = tt.allowLocal
			co, err := f.Fetch(t.Context(), Repository{URL: tt.url, Ref: Ref{Branch: "main"}}, opts)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Fetch: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Fetch of %s served %s", tt.url, co.Revision)
			}
			if !errors.Is(err, ErrLocalURL) || !IsTerminal(err) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Fetch error %q, want a terminal ErrLocalURL containing %q", err, tt.wantErr)
			}
		})
	}
}

func mustGetwd(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}

// entry is one entry of a tree written by hand, so that a test can write trees the git
// CLI refuses to build (the same name twice).
type entry struct {
	name string
	mode filemode.FileMode
	hash plumbing.Hash
}

// rawStore writes objects straight into the served bare repository.
type rawStore struct {
	t    *testing.T
	repo *gogit.Repository
}

func openRaw(t *testing.T, bare string) *rawStore {
	t.Helper()
	repo, err := gogit.PlainOpen(bare)
	if err != nil {
		t.Fatal(err)
	}
	return &rawStore{t: t, repo: repo}
}

func (s *rawStore) object(typ plumbing.ObjectType, data []byte) plumbing.Hash {
	s.t.Helper()
	obj := s.repo.Storer.NewEncodedObject()
	obj.SetType(typ)
	w, err := obj.Writer()
	if err != nil {
		s.t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		s.t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		s.t.Fatal(err)
	}
	h, err := s.repo.Storer.SetEncodedObject(obj)
	if err != nil {
		s.t.Fatal(err)
	}
	return h
}

func (s *rawStore) blob(content string) plumbing.Hash {
	return s.object(plumbing.BlobObject, []byte(content))
}

// tree writes the entries in the given order, unchecked.
func (s *rawStore) tree(entries ...entry) plumbing.Hash {
	var b bytes.Buffer
	for _, e := range entries {
		fmt.Fprintf(&b, "%o %s\x00", uint32(e.mode), e.name)
		b.Write(e.hash[:])
	}
	return s.object(plumbing.TreeObject, b.Bytes())
}

// commit makes a commit of tree the head of main and returns its SHA.
func (s *rawStore) commit(tree plumbing.Hash) string {
	s.t.Helper()
	sig := object.Signature{Name: "T", Email: "t@example.com", When: time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)}
	c := &object.Commit{Author: sig, Committer: sig, Message: "crafted\n", TreeHash: tree}
	obj := s.repo.Storer.NewEncodedObject()
	if err := c.Encode(obj); err != nil {
		s.t.Fatal(err)
	}
	h, err := s.repo.Storer.SetEncodedObject(obj)
	if err != nil {
		s.t.Fatal(err)
	}
	if err := s.repo.Storer.SetReference(plumbing.NewHashReference("refs/heads/main", h)); err != nil {
		s.t.Fatal(err)
	}
	return h.String()
}

// TestExportContained: a crafted tree cannot make the export write outside the checkout.
// Without it, a tree holding "a" twice (a symlink to a folder outside, then a folder with a
// file "b") wrote outside/b through the symlink and the fetch succeeded. A ".." entry is
// refused anyway (go-git validates tree names; the export checked filepath.IsLocal).
func TestExportContained(t *testing.T) {
	outside := t.TempDir()
	tests := []struct {
		name    string
		tree    func(s *rawStore) plumbing.Hash
		wantErr string // empty: the fetch succeeds
		want    []string
	}{
		{
			name: "symlink to outside, then a file under it",
			tree: func(s *rawStore) plumbing.Hash {
				sub := s.tree(entry{"b", filemode.Regular, s.blob("written through the link\n")})
				return s.tree(entry{"a", filemode.Symlink, s.blob(outside)}, entry{"a", filemode.Dir, sub})
			},
			wantErr: `"a/b": unsafe tree entry: its folder "a" is a symlink of the same commit`,
		},
		{
			name: "relative symlink climbing out, then a file under it",
			tree: func(s *rawStore) plumbing.Hash {
				sub := s.tree(entry{"b", filemode.Regular, s.blob("written through the link\n")})
				climb := strings.Repeat("../", 20) + strings.TrimPrefix(outside, "/")
				return s.tree(entry{"up", filemode.Symlink, s.blob(climb)}, entry{"up", filemode.Dir, sub})
			},
			wantErr: `"up/b": unsafe tree entry`,
		},
		{
			name: "dot-dot entry",
			tree: func(s *rawStore) plumbing.Hash {
				sub := s.tree(entry{"b", filemode.Regular, s.blob("climbed\n")})
				return s.tree(entry{"..", filemode.Dir, sub})
			},
			wantErr: `".."`,
		},
		{
			name: "file named twice",
			tree: func(s *rawStore) plumbing.Hash {
				return s.tree(entry{"a", filemode.Symlink, s.blob(filepath.Join(outside, "b"))}, entry{"a", filemode.Regular, s.blob("x\n")})
			},
			wantErr: `"a": unsafe tree entry: the tree holds this name twice`,
		},
		{
			name: "gitlink is skipped, escaping symlink kept for the renderer",
			tree: func(s *rawStore) plumbing.Hash {
				return s.tree(
					entry{"link", filemode.Symlink, s.blob(outside)},
					entry{"module", filemode.Submodule, plumbing.NewHash(strings.Repeat("ab", 20))},
					entry{"x.yaml", filemode.Regular, s.blob("x\n")},
				)
			},
			want: []string{"link", "x.yaml"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newTestRepo(t)
			s := openRaw(t, r.bare)
			head := s.commit(tt.tree(s))
			url, _ := serveHTTP(t, r.root, nil)
			co, err := fetch(t, NewFetcher(t.TempDir()), Repository{URL: url, Ref: Ref{Commit: head}})
			if entries, _ := os.ReadDir(outside); len(entries) != 0 {
				t.Fatalf("the export wrote outside its checkout: %v", entries)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Fetch error %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Fetch: %v", err)
			}
			entries, err := os.ReadDir(co.Dir)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range entries {
				got = append(got, e.Name())
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("checkout (-want +got):\n%s", diff)
			}
		})
	}
}

// TestExportLimits: a commit over a limit is refused with the path (the size, for a file
// over the per-file limit) and the limit, and
// nothing of it stays on disk. Without it, there were no limits: the default case exported a
// file of 8 MiB + 1 byte.
func TestExportLimits(t *testing.T) {
	tests := []struct {
		name    string
		files   map[string]string
		opts    func(o *FetchOptions)
		wantErr string
	}{
		{
			name:  "file over the default size",
			files: map[string]string{"big.bin": strings.Repeat("x", DefaultMaxFileSize+1)},
			// Refused as the pack arrives, before go-git inflates it (a blob has no path there).
			wantErr: `repository too large: the pack holds a blob of 8388609 bytes, over the limit of 8388608 per file`,
		},
		{
			name:    "too many files",
			files:   map[string]string{"a": "a", "b": "b", "c/d": "d"},
			opts:    func(o *FetchOptions) { o.MaxFiles = 2 },
			wantErr: `repository too large: more than 2 files (at "c/d")`,
		},
		{
			name:    "too many bytes",
			files:   map[string]string{"a": "12345", "b": "12345"},
			opts:    func(o *FetchOptions) { o.MaxTotalSize = 9 },
			wantErr: `repository too large: more than 9 bytes of files (at "b")`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newTestRepo(t)
			r.commit("one", tt.files)
			r.push()
			url, _ := serveHTTP(t, r.root, nil)
			cacheDir := t.TempDir()
			opts := loopbackOptions()
			if tt.opts != nil {
				tt.opts(&opts)
			}
			co, err := NewFetcher(cacheDir).Fetch(t.Context(), Repository{URL: url}, opts)
			if err == nil || !errors.Is(err, ErrTooLarge) || !IsTerminal(err) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Fetch = %v, %v; want a terminal ErrTooLarge containing %q", co, err, tt.wantErr)
			}
			if left, _ := filepath.Glob(filepath.Join(cacheDir, "*", "checkouts", "*")); len(left) != 0 {
				t.Errorf("checkouts left behind: %v", left)
			}
		})
	}
}
