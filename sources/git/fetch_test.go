package git

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/converge-dev/converge/sources/internal/fsfault"
)

// loopbackOptions are the default options with AllowLocal: the test servers listen on
// loopback, which a fetch refuses otherwise (TestFetchRefusesLocalAddresses).
func loopbackOptions() FetchOptions {
	opts := DefaultFetchOptions()
	opts.AllowLocal = true
	return opts
}

func fetch(t *testing.T, f *Fetcher, repo Repository) (*Checkout, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	return f.Fetch(ctx, repo, loopbackOptions())
}

func mustFetch(t *testing.T, f *Fetcher, repo Repository) *Checkout {
	t.Helper()
	co, err := fetch(t, f, repo)
	if err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	return co
}

func readFile(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestFetchHTTPBranch(t *testing.T) {
	r := newTestRepo(t)
	head := r.commit("first", map[string]string{"app/cm.yaml": "kind: ConfigMap\n", "README": "hi\n"})
	r.push()
	url, _ := serveHTTP(t, r.root, nil)

	for name, ref := range map[string]Ref{"branch": {Branch: "main"}, "default branch": {}} {
		t.Run(name, func(t *testing.T) {
			co := mustFetch(t, NewFetcher(t.TempDir()), Repository{URL: url, Ref: ref})
			want := Checkout{
				Dir:        co.Dir,
				Revision:   "main@sha1:" + head,
				Commit:     head,
				CommitTime: time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC),
			}
			got := *co
			got.CommitTime = got.CommitTime.UTC()
			if diff := cmp.Diff(want, got, cmpopts.IgnoreUnexported(Checkout{})); diff != "" {
				t.Errorf("checkout (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff("kind: ConfigMap\n", readFile(t, co.Dir, "app/cm.yaml")); diff != "" {
				t.Errorf("app/cm.yaml (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFetchHTTPAuth(t *testing.T) {
	r := newTestRepo(t)
	head := r.commit("first", map[string]string{"a.yaml": "a\n"})
	r.push()
	url, _ := serveHTTP(t, r.root, &httpCreds{user: "alice", password: "s3cret", token: "tok3n"})

	tests := []struct {
		name    string
		auth    Auth
		wantErr error
	}{
		{name: "basic auth", auth: Auth{Username: "alice", Password: "s3cret"}},
		{name: "bearer token", auth: Auth{BearerToken: "tok3n"}},
		{name: "wrong password", auth: Auth{Username: "alice", Password: "nope"}, wantErr: ErrAuth},
		{name: "wrong token", auth: Auth{BearerToken: "nope"}, wantErr: ErrAuth},
		{name: "anonymous", wantErr: ErrAuth},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			co, err := fetch(t, NewFetcher(t.TempDir()), Repository{URL: url, Ref: Ref{Branch: "main"}, Auth: tt.auth})
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Fetch: %v", err)
				}
				if diff := cmp.Diff("main@sha1:"+head, co.Revision); diff != "" {
					t.Errorf("revision (-want +got):\n%s", diff)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Fetch error = %v, want %v", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), "authentication") || strings.Contains(err.Error(), "nope") {
				t.Errorf("error %q should say authentication failed and not leak the secret", err)
			}
		})
	}
}

func TestFetchSSH(t *testing.T) {
	r := newTestRepo(t)
	head := r.commit("first", map[string]string{"a.yaml": "a\n"})
	r.push()
	srv := serveSSH(t, r.root)
	url := "ssh://git@" + srv.addr + "/repo.git"
	other, _ := newSigner(t)
	otherKnownHosts := []byte(strings.Replace(string(srv.knownHosts),
		strings.Fields(string(srv.knownHosts))[2], keyBase64(other), 1))
	_, strangerKey := newSigner(t)

	tests := []struct {
		name    string
		auth    Auth
		wantErr error
		wantMsg string
	}{
		{name: "key and known_hosts", auth: Auth{SSHPrivateKey: srv.clientKey, SSHKnownHosts: srv.knownHosts}},
		{name: "host key differs from known_hosts", auth: Auth{SSHPrivateKey: srv.clientKey, SSHKnownHosts: otherKnownHosts},
			wantErr: ErrUnknownHostKey, wantMsg: "does not match known_hosts"},
		{name: "host missing from known_hosts", auth: Auth{SSHPrivateKey: srv.clientKey,
			SSHKnownHosts: []byte("[127.0.0.1]:1 " + keyType(srv) + " " + keyBase64(srv.hostKey) + "\n")},
			wantErr: ErrUnknownHostKey, wantMsg: "host key unknown"},
		{name: "no known_hosts", auth: Auth{SSHPrivateKey: srv.clientKey},
			wantErr: ErrUnknownHostKey, wantMsg: "no known_hosts given"},
		{name: "key not authorized", auth: Auth{SSHPrivateKey: strangerKey, SSHKnownHosts: srv.knownHosts},
			wantErr: ErrAuth, wantMsg: "unable to authenticate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			co, err := fetch(t, NewFetcher(t.TempDir()), Repository{URL: url, Ref: Ref{Branch: "main"}, Auth: tt.auth})
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Fetch: %v", err)
				}
				if diff := cmp.Diff("main@sha1:"+head, co.Revision); diff != "" {
					t.Errorf("revision (-want +got):\n%s", diff)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("Fetch error = %v, want %v containing %q", err, tt.wantErr, tt.wantMsg)
			}
		})
	}
}

func keyType(s *sshServer) string { return s.hostKey.PublicKey().Type() }

func keyBase64(s interface{ PublicKey() sshPublicKey }) string {
	return strings.Fields(string(marshalAuthorizedKey(s.PublicKey())))[1]
}

func TestFetchRefs(t *testing.T) {
	r := newTestRepo(t)
	r.bareConfig("uploadpack.allowReachableSHA1InWant", "true")
	old := r.commit("one", map[string]string{"v.txt": "1.0.0"})
	r.git("tag", "v1.0.0")
	v12 := r.commit("two", map[string]string{"v.txt": "1.2.0"})
	r.git("tag", "-a", "-m", "release 1.2.0", "v1.2.0")
	v110 := r.commit("three", map[string]string{"v.txt": "1.10.0"})
	r.git("tag", "v1.10.0")
	r.commit("four", map[string]string{"v.txt": "1.11.0-rc.1"})
	r.git("tag", "v1.11.0-rc.1")
	v2 := r.commit("five", map[string]string{"v.txt": "2.0.0"})
	r.git("tag", "v2.0.0")
	r.git("tag", "not-a-version")
	r.push()
	url, _ := serveHTTP(t, r.root, nil)

	tests := []struct {
		name    string
		ref     Ref
		want    string // revision
		wantErr string
	}{
		{name: "lightweight tag", ref: Ref{Tag: "v1.0.0"}, want: "v1.0.0@sha1:" + old},
		{name: "annotated tag", ref: Ref{Tag: "v1.2.0"}, want: "v1.2.0@sha1:" + v12},
		{name: "semver range picks highest", ref: Ref{SemVer: ">=1.0.0 <2.0.0"}, want: "v1.10.0@sha1:" + v110},
		{name: "semver caret", ref: Ref{SemVer: "^1.2"}, want: "v1.10.0@sha1:" + v110},
		{name: "semver any", ref: Ref{SemVer: "*"}, want: "v2.0.0@sha1:" + v2},
		{name: "exact commit", ref: Ref{Commit: v12}, want: "sha1:" + v12},
		{name: "commit with branch", ref: Ref{Branch: "main", Commit: old}, want: "main@sha1:" + old},
		{name: "missing branch", ref: Ref{Branch: "nope"}, wantErr: `branch "nope": ref not found`},
		{name: "missing tag", ref: Ref{Tag: "v9.9.9"}, wantErr: `tag "v9.9.9": ref not found`},
		{name: "semver no match", ref: Ref{SemVer: ">=3.0.0"}, wantErr: `semver ">=3.0.0": no matching tag: ref not found`},
		{name: "missing commit", ref: Ref{Commit: strings.Repeat("ab", 20)}, wantErr: "commit " + strings.Repeat("ab", 20) + ": ref not found"},
		{name: "bad commit", ref: Ref{Commit: "abc"}, wantErr: `commit "abc": want 40 lowercase hex`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := NewFetcher(t.TempDir())
			co, err := fetch(t, f, Repository{URL: url, Ref: tt.ref})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Fetch error = %v, want it to contain %q", err, tt.wantErr)
				}
				if strings.Contains(tt.wantErr, "ref not found") && !errors.Is(err, ErrRefNotFound) {
					t.Errorf("error %v is not ErrRefNotFound", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Fetch: %v", err)
			}
			if diff := cmp.Diff(tt.want, co.Revision); diff != "" {
				t.Errorf("revision (-want +got):\n%s", diff)
			}
			// One shallow transfer: a commit is fetched by SHA when the server allows it.
			if diff := cmp.Diff(1, f.Stats().Transfers); diff != "" {
				t.Errorf("transfers (-want +got):\n%s", diff)
			}
			wantV := strings.TrimPrefix(strings.Split(tt.want, "@")[0], "v")
			if tt.ref.Commit != "" {
				wantV = map[string]string{v12: "1.2.0", old: "1.0.0"}[tt.ref.Commit]
			}
			if diff := cmp.Diff(wantV, readFile(t, co.Dir, "v.txt")); diff != "" {
				t.Errorf("v.txt (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFetchCommitWithoutSHAWants covers servers that refuse to serve a commit by SHA: the
// fetcher falls back to a full fetch.
func TestFetchCommitWithoutSHAWants(t *testing.T) {
	r := newTestRepo(t)
	old := r.commit("one", map[string]string{"v.txt": "old"})
	r.commit("two", map[string]string{"v.txt": "new"})
	r.push()
	url, _ := serveHTTP(t, r.root, nil)

	f := NewFetcher(t.TempDir())
	repo := Repository{URL: url, Ref: Ref{Commit: old}}
	co := mustFetch(t, f, repo)
	if diff := cmp.Diff("old", readFile(t, co.Dir, "v.txt")); diff != "" {
		t.Errorf("v.txt (-want +got):\n%s", diff)
	}
	// A second fetch of a cached commit costs one ref advertisement (the credentials check).
	mustFetch(t, f, repo)
	if diff := cmp.Diff(Stats{Lookups: 1, Transfers: 2}, f.Stats()); diff != "" {
		t.Errorf("stats: want a refused by-SHA fetch, then a full one, then a lookup (-want +got):\n%s", diff)
	}
}

func TestFetchForcePushedBranch(t *testing.T) {
	r := newTestRepo(t)
	r.commit("one", map[string]string{"v.txt": "one"})
	r.push()
	url, _ := serveHTTP(t, r.root, nil)
	f := NewFetcher(t.TempDir())
	repo := Repository{URL: url, Ref: Ref{Branch: "main"}}
	mustFetch(t, f, repo)

	// Rewrite history: an unrelated root commit replaces the branch.
	r.git("checkout", "-q", "--orphan", "rewrite")
	r.git("rm", "-rq", "--cached", ".")
	newHead := r.commit("rewritten", map[string]string{"v.txt": "rewritten"})
	r.git("branch", "-M", "main")
	r.push()

	co := mustFetch(t, f, repo)
	if diff := cmp.Diff("main@sha1:"+newHead, co.Revision); diff != "" {
		t.Errorf("revision (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff("rewritten", readFile(t, co.Dir, "v.txt")); diff != "" {
		t.Errorf("v.txt (-want +got):\n%s", diff)
	}
}

// TestFetchNoNewCommit checks that a poll without a new commit only reads the ref
// advertisement: no git-upload-pack POST reaches the server.
func TestFetchNoNewCommit(t *testing.T) {
	r := newTestRepo(t)
	r.commit("one", map[string]string{"v.txt": "one"})
	r.push()
	url, log := serveHTTP(t, r.root, nil)
	f := NewFetcher(t.TempDir())
	repo := Repository{URL: url, Ref: Ref{Branch: "main"}}

	first := mustFetch(t, f, repo)
	if !containsPrefix(log.take(), "POST /repo.git/git-upload-pack") {
		t.Fatal("first fetch should transfer a pack")
	}
	second := mustFetch(t, f, repo)
	want := []string{"GET /repo.git/info/refs"}
	if diff := cmp.Diff(want, log.take()); diff != "" {
		t.Errorf("requests of a no-change poll (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(first, second, cmpopts.IgnoreUnexported(Checkout{})); diff != "" {
		t.Errorf("checkout changed without a commit (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(Stats{Lookups: 2, Transfers: 1}, f.Stats()); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}

	head := r.commit("two", map[string]string{"v.txt": "two"})
	r.push()
	third := mustFetch(t, f, repo)
	if diff := cmp.Diff("main@sha1:"+head, third.Revision); diff != "" {
		t.Errorf("revision after a new commit (-want +got):\n%s", diff)
	}
	if !containsPrefix(log.take(), "POST /repo.git/git-upload-pack") {
		t.Error("a new commit should be fetched")
	}
}

func containsPrefix(reqs []string, prefix string) bool {
	for _, r := range reqs {
		if strings.HasPrefix(r, prefix) {
			return true
		}
	}
	return false
}

func TestFetchOldCheckoutsRemoved(t *testing.T) {
	r := newTestRepo(t)
	url, _ := serveHTTP(t, r.root, nil)
	f := NewFetcher(t.TempDir())
	repo := Repository{URL: url, Ref: Ref{Branch: "main"}}
	opts := loopbackOptions()
	opts.KeepCheckouts = 2
	var dirs []string
	for i := range 3 {
		r.commit("c", map[string]string{"v.txt": strings.Repeat("x", i+1)})
		r.push()
		co, err := f.Fetch(t.Context(), repo, opts)
		if err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, co.Dir)
	}
	var exist []bool
	for _, d := range dirs {
		_, err := os.Stat(d)
		exist = append(exist, err == nil)
	}
	if diff := cmp.Diff([]bool{false, true, true}, exist); diff != "" {
		t.Errorf("checkouts kept (-want +got):\n%s", diff)
	}
}

// TestFetchCheckoutKeptForItsReader: a render reads its checkout after Fetch returned, under
// the same ctx; fetches of newer commits by other callers (another Sync on another branch of
// the same URL and credentials) must not remove it before that ctx's deadline, or the render
// would read a half-removed tree (I8: a truncated render never prunes). Once the deadline has
// passed, the checkout is an old one like any other.
func TestFetchCheckoutKeptForItsReader(t *testing.T) {
	r := newTestRepo(t)
	url, _ := serveHTTP(t, r.root, nil)
	f := NewFetcher(t.TempDir())
	repo := Repository{URL: url, Ref: Ref{Branch: "main"}}
	opts := loopbackOptions()
	opts.KeepCheckouts = 1
	r.commit("c", map[string]string{"v.txt": "read"})
	r.push()
	ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
	defer cancel()
	read, err := f.Fetch(ctx, repo, opts)
	if err != nil {
		t.Fatal(err)
	}
	var others []string
	for i := range 2 {
		r.commit("c", map[string]string{"v.txt": strings.Repeat("x", i+1)})
		r.push()
		co, err := f.Fetch(t.Context(), repo, opts) // no deadline: no reservation
		if err != nil {
			t.Fatal(err)
		}
		others = append(others, co.Dir)
	}
	var exist []bool
	for _, d := range append([]string{read.Dir}, others...) {
		_, err := os.Stat(d)
		exist = append(exist, err == nil)
	}
	if diff := cmp.Diff([]bool{true, false, true}, exist); diff != "" {
		t.Errorf("checkouts kept, the reserved one first (-want +got):\n%s", diff)
	}

	past := time.Now().Add(-time.Minute)
	if err := os.Chtimes(read.Dir, past, past); err != nil { // its reader's deadline passed
		t.Fatal(err)
	}
	r.commit("c", map[string]string{"v.txt": "after"})
	r.push()
	if _, err := f.Fetch(t.Context(), repo, opts); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(read.Dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a checkout past its reservation should be removed, stat: %v", err)
	}
}

// TestFetchRemovalStoppedPartWayIsNotACheckout: an old checkout whose removal stops
// part-way (a file that cannot be removed; a process killed in the middle leaves the same)
// is not found under its name, so a later fetch of its commit (a rollback) exports it
// again whole rather than render what is left (I8). What is left is swept once it can be.
func TestFetchRemovalStoppedPartWayIsNotACheckout(t *testing.T) {
	r := newTestRepo(t)
	files := map[string]string{}
	for i := range 8 {
		files[fmt.Sprintf("cm%d.yaml", i)] = fmt.Sprintf("kind: ConfigMap\nname: cm%d\n", i)
	}
	old := r.commit("old", files)
	r.push()
	url, _ := serveHTTP(t, r.root, nil)
	cacheDir := t.TempDir()
	f := NewFetcher(cacheDir)
	opts := loopbackOptions()
	opts.KeepCheckouts = 1
	co, err := f.Fetch(t.Context(), Repository{URL: url, Ref: Ref{Branch: "main"}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	co.Release()
	past := time.Now().Add(-time.Minute)
	if err := os.Chtimes(co.Dir, past, past); err != nil {
		t.Fatal(err)
	}
	names, _ := filepath.Glob(filepath.Join(co.Dir, "*.yaml"))
	slices.Sort(names)
	fsfault.Undeletable(t, cacheDir, names[len(names)-1])

	r.commit("new", map[string]string{"cm0.yaml": "kind: ConfigMap\nname: new\n"})
	r.push()
	_, _ = f.Fetch(t.Context(), Repository{URL: url, Ref: Ref{Branch: "main"}}, opts) // removes the old checkout, part-way

	back, err := f.Fetch(t.Context(), Repository{URL: url, Ref: Ref{Commit: old}}, opts)
	if err != nil {
		t.Fatalf("fetch the old commit again: %v", err)
	}
	got, _ := filepath.Glob(filepath.Join(back.Dir, "*.yaml"))
	back.Release()
	if len(got) != len(files) {
		t.Fatalf("the old commit's checkout has %d of its %d files: what its stopped removal left", len(got), len(files))
	}

	if err := fsfault.Release(cacheDir); err != nil {
		t.Fatal(err)
	}
	r.commit("newer", map[string]string{"cm0.yaml": "kind: ConfigMap\nname: newer\n"})
	r.push()
	co, err = f.Fetch(t.Context(), Repository{URL: url, Ref: Ref{Branch: "main"}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	co.Release()
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(co.Dir), tmpPrefix+"*")); len(left) > 0 {
		t.Errorf("the stopped removal left %v after the next fetch", left)
	}
}

func TestFetchLocalAndConcurrent(t *testing.T) {
	r := newTestRepo(t)
	head := r.commit("one", map[string]string{"v.txt": "one"})
	r.push()
	f := NewFetcher(t.TempDir())
	for _, url := range []string{r.bare, "file://" + r.bare} {
		var wg sync.WaitGroup
		revs := make([]string, 4)
		errs := make([]error, 4)
		for i := range revs {
			wg.Go(func() {
				opts := loopbackOptions()
				opts.AllowLocal = true
				co, err := f.Fetch(t.Context(), Repository{URL: url, Ref: Ref{Branch: "main"}}, opts)
				errs[i] = err
				if err == nil {
					revs[i] = co.Revision
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		want := []string{"main@sha1:" + head, "main@sha1:" + head, "main@sha1:" + head, "main@sha1:" + head}
		if diff := cmp.Diff(want, revs); diff != "" {
			t.Errorf("%s: revisions (-want +got):\n%s", url, diff)
		}
	}
}

func TestFetchCanceled(t *testing.T) {
	r := newTestRepo(t)
	r.commit("one", map[string]string{"v.txt": "one"})
	r.push()
	url, _ := serveHTTP(t, r.root, nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := NewFetcher(t.TempDir()).Fetch(ctx, Repository{URL: url}, loopbackOptions())
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Fetch error = %v, want context.Canceled", err)
	}
}

// A checkout already on disk is returned with its own commit's time: from the Fetcher that
// wrote it, from one started again on the same cache, and after another commit.
func TestFetchCommitTimeOfACheckoutOnDisk(t *testing.T) {
	r := newTestRepo(t)
	first := r.commit("first", map[string]string{"a.yaml": "a\n"})
	r.push()
	url, _ := serveHTTP(t, r.root, nil)
	cacheDir := t.TempDir()
	f := NewFetcher(cacheDir)
	firstTime := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	check := func(name string, f *Fetcher, ref Ref, commit string, want time.Time) {
		t.Helper()
		co := mustFetch(t, f, Repository{URL: url, Ref: ref})
		defer co.Release()
		if co.Commit != commit || !co.CommitTime.Equal(want) {
			t.Errorf("%s: commit %s at %s, want %s at %s", name, co.Commit, co.CommitTime.UTC(), commit, want)
		}
	}
	check("first fetch", f, Ref{Branch: "main"}, first, firstTime)
	check("again", f, Ref{Branch: "main"}, first, firstTime)

	cmd := exec.Command("git", "commit", "-q", "--allow-empty", "-m", "second")
	cmd.Dir = r.work
	cmd.Env = append(gitEnv(t.TempDir()), "GIT_COMMITTER_DATE=2025-06-07T08:09:10Z")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git commit: %v\n%s", err, out)
	}
	second := r.git("rev-parse", "HEAD")
	r.push()
	secondTime := time.Date(2025, 6, 7, 8, 9, 10, 0, time.UTC)
	check("new commit", f, Ref{Branch: "main"}, second, secondTime)
	check("new commit again", f, Ref{Branch: "main"}, second, secondTime)
	check("the first by hash", f, Ref{Commit: first}, first, firstTime)
	check("a new Fetcher on the same cache", NewFetcher(cacheDir), Ref{Branch: "main"}, second, secondTime)
}

// serveHTTPUnpeeled serves root as serveHTTP does, with the peeled lines ("<hash>
// refs/tags/x^{}") left out of the ref advertisement, as a server that does not peel tags.
// It counts the lines it left out in dropped.
func serveHTTPUnpeeled(t *testing.T, root string, dropped *atomic.Int64) string {
	t.Helper()
	backend := gitBackend(t, root)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/info/refs") {
			backend.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		backend.ServeHTTP(rec, r)
		for k, v := range rec.Header() {
			if k != "Content-Length" {
				w.Header()[k] = v
			}
		}
		w.WriteHeader(rec.Code)
		body, n := dropPeeledLines(rec.Body.Bytes())
		dropped.Add(int64(n))
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/repo.git"
}

// dropPeeledLines removes the pkt-lines naming a peeled ref from a ref advertisement and
// says how many it removed.
func dropPeeledLines(body []byte) ([]byte, int) {
	var out []byte
	dropped := 0
	for len(body) >= 4 {
		n, err := strconv.ParseUint(string(body[:4]), 16, 16)
		if err != nil || (n != 0 && (n < 4 || int(n) > len(body))) {
			break
		}
		line := body[:max(n, 4)]
		body = body[len(line):]
		if strings.Contains(string(line), "^{}") {
			dropped++
			continue
		}
		out = append(out, line...)
	}
	return append(out, body...), dropped
}

// An annotated tag from a server that does not peel it resolves to its commit at every
// fetch, not only the first, and with tag verification too.
func TestFetchUnpeeledAnnotatedTag(t *testing.T) {
	alice, alicePub := newPGPKey(t, "alice")
	r := newTestRepo(t)
	head := r.commitPGP("signed", map[string]string{"a.yaml": "a\n"}, alice)
	r.tagPGP("v1.0.0", head, alice)
	r.git("tag", "-a", "-m", "v2", "v2.0.0")
	r.push()
	var dropped atomic.Int64
	url := serveHTTPUnpeeled(t, r.root, &dropped)
	for name, repo := range map[string]Repository{
		"annotated":          {URL: url, Ref: Ref{Tag: "v2.0.0"}},
		"semver":             {URL: url, Ref: Ref{SemVer: ">=2.0.0"}},
		"signed, verify tag": {URL: url, Ref: Ref{Tag: "v1.0.0"}, Verify: &Verification{Mode: VerifyTag, Keys: map[string][]byte{"alice.asc": alicePub}}},
	} {
		t.Run(name, func(t *testing.T) {
			f := NewFetcher(t.TempDir())
			for i := range 3 {
				co, err := fetch(t, f, repo)
				if err != nil {
					t.Fatalf("fetch %d: %v", i+1, err)
				}
				if co.Commit != head {
					t.Errorf("fetch %d: commit %s, want %s", i+1, co.Commit, head)
				}
				co.Release()
			}
		})
	}
	if dropped.Load() == 0 {
		t.Fatal("the server left no peeled line out: nothing here is unpeeled")
	}
}

// A commit ref naming an object that is not a commit is refused as such.
func TestFetchCommitRefToATagObject(t *testing.T) {
	r := newTestRepo(t)
	r.commit("first", map[string]string{"a.yaml": "a\n"})
	r.git("tag", "-a", "-m", "v1", "v1")
	r.push()
	url, _ := serveHTTP(t, r.root, nil)
	f := NewFetcher(t.TempDir())
	mustFetch(t, f, Repository{URL: url, Ref: Ref{Tag: "v1"}}).Release()
	tag := r.git("rev-parse", "v1")
	_, err := fetch(t, f, Repository{URL: url, Ref: Ref{Commit: tag}})
	if !errors.Is(err, ErrRefNotFound) || !strings.Contains(err.Error(), tag+": not a commit") {
		t.Fatalf("fetch of a tag object as a commit: %v, want %q (%v)", err, tag+": not a commit", ErrRefNotFound)
	}
}
