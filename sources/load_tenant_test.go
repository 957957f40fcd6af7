package sources

import (
	"context"
	"errors"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/converge-dev/converge/e2e/gitserver"
	"github.com/converge-dev/converge/sources/git"
)

// serveAuth serves the repositories of root with git http-backend behind basic auth
// (user "alice", password "s3cret") and returns the base URL.
func serveAuth(t *testing.T, root string) string {
	t.Helper()
	execPath, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatalf("git --exec-path: %v", err)
	}
	backend := &cgi.Handler{
		Path: filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend"),
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1"},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if user, password, ok := r.BasicAuth(); !ok || user != "alice" || password != "s3cret" {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		backend.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// loopbackLoadOptions are the default options with AllowLocal: the test git servers listen
// on loopback, which a fetch refuses otherwise.
func loopbackLoadOptions() LoadOptions {
	opts := DefaultLoadOptions()
	opts.Fetch.AllowLocal = true
	return opts
}

// TestLoadPrivateCommitNeedsCredentials: a Sync without the credentials cannot get the
// render of a private commit another Sync's credentials fetched, not even by naming the
// commit: the fetch comes before the render cache and fails. Without it, the fetcher served the
// cached commit with no request and the Loader handed out the cached render.
func TestLoadPrivateCommitNeedsCredentials(t *testing.T) {
	pub, err := gitserver.Start(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	head, err := pub.Publish("private", "main", writeTree(t, map[string]string{"app/cm.yaml": cm("secret-app", "apps")}), "one")
	if err != nil {
		t.Fatal(err)
	}
	url := serveAuth(t, pub.Root) + "/private.git"
	l := NewLoader(t.TempDir())
	alice := git.Auth{Username: "alice", Password: "s3cret"}

	b, err := l.Load(t.Context(), Source{Git: git.Repository{URL: url, Ref: git.Ref{Branch: "main"}, Auth: alice}, Path: "app"}, loopbackLoadOptions())
	if err != nil || len(b.Objects) != 1 {
		t.Fatalf("Load with credentials = %v, %v; want one object", b, err)
	}
	for name, auth := range map[string]git.Auth{
		"no credentials": {},
		"wrong password": {Username: "alice", Password: "guess"},
	} {
		for _, ref := range []git.Ref{{Branch: "main"}, {Commit: head}} {
			t.Run(name+" "+ref.String(), func(t *testing.T) {
				src := Source{Git: git.Repository{URL: url, Ref: ref, Auth: auth}, Path: "app"}
				b, err := l.Load(t.Context(), src, loopbackLoadOptions())
				if b != nil || err == nil {
					t.Fatalf("Load = %+v, %v; want no bundle and an error", b, err)
				}
				if !errors.Is(err, git.ErrAuth) {
					t.Errorf("Load error %v, want %v", err, git.ErrAuth)
				}
			})
		}
	}
}

// TestLoadRenderLimitsRaiseExportLimits: a repository over the git export's limits loads
// when the render limits (the --max-* flags) are raised above them.
func TestLoadRenderLimitsRaiseExportLimits(t *testing.T) {
	srv, err := gitserver.Start(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	files := map[string]string{"app/a.yaml": cm("a", "x"), "app/b.yaml": cm("b", "x"), "app/c.yaml": cm("c", "x")}
	if _, err := srv.Publish("big", "main", writeTree(t, files), "one"); err != nil {
		t.Fatal(err)
	}
	src := Source{Git: git.Repository{URL: srv.RepoURL("big"), Ref: git.Ref{Branch: "main"}}, Path: "app"}
	opts := loopbackLoadOptions()
	opts.Fetch.MaxFiles, opts.Render.Limits.MaxFiles = 2, 2
	if _, err := NewLoader(t.TempDir()).Load(t.Context(), src, opts); !errors.Is(err, git.ErrTooLarge) {
		t.Fatalf("Load over the export limit: %v, want %v", err, git.ErrTooLarge)
	}
	opts.Render.Limits.MaxFiles = 3
	if b, err := NewLoader(t.TempDir()).Load(t.Context(), src, opts); err != nil || len(b.Objects) != 3 {
		t.Errorf("Load with --max-files 3: %v, %v; want 3 objects", b, err)
	}
}

// TestLoadPackIndexTakesRenderSlot: indexing a received pack (go-git's delta cache takes up
// to 96 MiB) takes a render slot, so the memory the render slots bound covers it: with the
// only slot held, a fetch that received a pack waits for it and ends with its context, and
// runs once the slot is free.
func TestLoadPackIndexTakesRenderSlot(t *testing.T) {
	srv, err := gitserver.Start(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	if _, err := srv.Publish("apps", "main", writeTree(t, map[string]string{"app/cm.yaml": cm("a", "x")}), "one"); err != nil {
		t.Fatal(err)
	}
	src := Source{Git: git.Repository{URL: srv.RepoURL("apps"), Ref: git.Ref{Branch: "main"}}, Path: "app"}
	opts := loopbackLoadOptions()
	opts.Render.Limits.RenderSlots = 7 // a set of slots of its own
	var release func()
	for range 7 {
		r, err := renderSlots(7).acquire(t.Context(), "other")
		if err != nil {
			t.Fatal(err)
		}
		release = r
	}
	l := NewLoader(t.TempDir())
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if _, err := l.Load(ctx, src, opts); err == nil || !strings.Contains(err.Error(), "not finished within 2s") {
		t.Fatalf("Load with every render slot held: %v, want the fetch waiting for a slot to index its pack until its deadline", err)
	}
	release()
	if b, err := l.Load(t.Context(), src, opts); err != nil || len(b.Objects) != 1 {
		t.Fatalf("Load with a free slot: %v, %v; want one object", b, err)
	}
}
