package sources

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/converge-dev/converge/sources/git"
)

func TestLoadLocal(t *testing.T) {
	dir := writeTree(t, map[string]string{"apps/a.yaml": cm("a", "apps"), ".git/HEAD": "ignored"})
	l := NewLoader(t.TempDir())
	src := Source{Dir: dir, Path: "apps"}

	first, err := l.Load(t.Context(), src, DefaultLoadOptions())
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if !strings.HasPrefix(first.Revision, "sha256:") || len(first.Revision) != len("sha256:")+64 {
		t.Errorf("revision %q, want sha256:<64 hex>", first.Revision)
	}
	renders := l.cache.renders
	second, err := l.Load(t.Context(), src, DefaultLoadOptions())
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if len(second.Objects) != 1 || l.cache.renders != renders || second.Key != first.Key || !equality.Semantic.DeepEqual(second.Objects, first.Objects) {
		t.Errorf("an unchanged source was rendered again, or loaded other objects under its key")
	}
	if second.Objects[0] == first.Objects[0] {
		t.Errorf("two loads share their objects: each decodes its own from the kept render")
	}
	for _, b := range []*Bundle{first, second} {
		if !slices.Equal(b.Own, []bool{true}) {
			t.Errorf("a load's Own is %v, want its one object its own", b.Own)
		}
	}
	if diff := cmp.Diff(first.Revision, second.Revision); diff != "" {
		t.Errorf("revision changed without an edit (-want +got):\n%s", diff)
	}

	if err := os.WriteFile(filepath.Join(dir, "apps/a.yaml"), []byte(cm("b", "apps")), 0o644); err != nil {
		t.Fatal(err)
	}
	third, err := l.Load(t.Context(), src, DefaultLoadOptions())
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if third.Revision == first.Revision {
		t.Errorf("revision %q did not change after an edit", third.Revision)
	}
	if diff := cmp.Diff([]string{"v1 ConfigMap apps/b"}, ids(third.Objects)); diff != "" {
		t.Errorf("objects after an edit (-want +got):\n%s", diff)
	}

	_, err = l.Load(t.Context(), Source{Dir: filepath.Join(dir, "missing")}, DefaultLoadOptions())
	if !errors.Is(err, ErrPathNotFound) || !IsTerminal(err) {
		t.Errorf("Load of a missing folder: %v, want a terminal ErrPathNotFound", err)
	}
}

// TestLoadGit loads from a local git repository. A second load of the same commit must
// come from the render cache: the test breaks the exported checkout in between, and the
// load still succeeds.
func TestLoadGit(t *testing.T) {
	repo := t.TempDir()
	gitCmd := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
			"GIT_AUTHOR_NAME=T", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=T", "GIT_COMMITTER_EMAIL=t@example.com")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	gitCmd("init", "-q", "-b", "main")
	if err := os.MkdirAll(filepath.Join(repo, "deploy"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "deploy/cm.yaml"), []byte(cm("web", "apps")), 0o644); err != nil {
		t.Fatal(err)
	}
	gitCmd("add", "-A")
	gitCmd("commit", "-q", "-m", "one")
	head := gitCmd("rev-parse", "HEAD")

	l := NewLoader(t.TempDir())
	src := Source{Git: git.Repository{URL: repo, Ref: git.Ref{Branch: "main"}}, Path: "deploy"}
	if _, err := l.Load(t.Context(), src, DefaultLoadOptions()); !errors.Is(err, git.ErrLocalURL) || !IsTerminal(err) {
		t.Fatalf("Load of a local path with the default options: %v, want a terminal ErrLocalURL", err)
	}
	opts := DefaultLoadOptions()
	opts.Fetch.AllowLocal = true
	b, err := l.Load(t.Context(), src, opts)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if len(b.Key) != 64 {
		t.Errorf("render key %q, want 64 hex digits", b.Key)
	}
	want := &Bundle{Revision: "main@sha1:" + head, Key: b.Key, Objects: b.Objects, Own: []bool{true}, Origins: []string{"deploy/cm.yaml:1"}, CommitTime: commitTime(t, gitCmd("log", "-1", "--format=%ct"))}
	if diff := cmp.Diff(want, b); diff != "" {
		t.Errorf("bundle (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"v1 ConfigMap apps/web"}, ids(b.Objects)); diff != "" {
		t.Errorf("objects (-want +got):\n%s", diff)
	}

	checkouts, _ := filepath.Glob(filepath.Join(l.fetcher.CacheDir(), "*", "checkouts", head, "deploy", "cm.yaml"))
	if len(checkouts) != 1 {
		t.Fatalf("found checkouts %v, want one", checkouts)
	}
	if err := os.WriteFile(checkouts[0], []byte("broken: ["), 0o644); err != nil {
		t.Fatal(err)
	}
	again, err := l.Load(t.Context(), src, opts)
	if err != nil {
		t.Fatalf("second Load rendered again instead of using the cache: %v", err)
	}
	if diff := cmp.Diff(b, again); diff != "" {
		t.Errorf("second load (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(git.Stats{Lookups: 2, Transfers: 1}, l.FetchStats()); diff != "" {
		t.Errorf("fetch stats (-want +got):\n%s", diff)
	}

	// A bad revision: the bundle still carries the revision, and the error is terminal.
	if err := os.WriteFile(filepath.Join(repo, "deploy/cm.yaml"), []byte("kind: ConfigMap\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitCmd("commit", "-q", "-am", "break")
	bad := gitCmd("rev-parse", "HEAD")
	badTime := commitTime(t, gitCmd("log", "-1", "--format=%ct"))
	b, err = l.Load(t.Context(), src, opts)
	if !IsTerminal(err) || !strings.Contains(err.Error(), "deploy/cm.yaml:1: ConfigMap: missing apiVersion, missing metadata.name") {
		t.Fatalf("Load of a bad revision: %v", err)
	}
	if diff := cmp.Diff(&Bundle{Revision: "main@sha1:" + bad, Key: b.Key, Own: []bool{}, CommitTime: badTime}, b); diff != "" {
		t.Errorf("bundle of a bad revision (-want +got):\n%s", diff)
	}
}

// commitTime parses git's %ct (Unix seconds).
func commitTime(t *testing.T, unix string) time.Time {
	t.Helper()
	sec, err := strconv.ParseInt(strings.TrimSpace(unix), 10, 64)
	if err != nil {
		t.Fatalf("commit time %q: %v", unix, err)
	}
	return time.Unix(sec, 0)
}

// TestLoadKeepsOneRenderPerOwner: a render loaded for an owner (a Sync) is dropped from the
// render cache as soon as the owner loads another one (a new commit), unless another
// owner's last load is that render; Forget releases an owner. Without it, every render stayed
// until 256 newer ones pushed it out: a Sync of 10,000 objects kept one render per commit.
func TestLoadKeepsOneRenderPerOwner(t *testing.T) {
	dir := writeTree(t, map[string]string{"apps/a.yaml": cm("a", "apps")})
	l := NewLoader(t.TempDir())
	src := Source{Dir: dir, Path: "apps"}
	load := func(owner string) *Bundle {
		t.Helper()
		opts := DefaultLoadOptions()
		opts.Owner = owner
		b, err := l.Load(t.Context(), src, opts)
		if err != nil {
			t.Fatalf("Load for %q: %v", owner, err)
		}
		return b
	}
	edit := func(name string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "apps/a.yaml"), []byte(cm(name, "apps")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	held := func() []string {
		var names []string
		for _, key := range l.cache.order {
			objs, err := l.cache.entries[key].objects()
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range objs {
				names = append(names, o.GetName())
			}
		}
		slices.Sort(names)
		return names
	}

	load("sync-1")
	load("sync-2") // the same render
	edit("b")
	load("sync-1")
	if diff := cmp.Diff([]string{"a", "b"}, held()); diff != "" {
		t.Errorf("sync-2 still uses render a: both kept (-want +got):\n%s", diff)
	}
	load("sync-2")
	if diff := cmp.Diff([]string{"b"}, held()); diff != "" {
		t.Errorf("nobody uses render a any more (-want +got):\n%s", diff)
	}
	renders := l.cache.renders
	first := load("sync-1")
	if again := load("sync-1"); l.cache.renders != renders || again.Key != first.Key {
		t.Error("an unchanged source was rendered again for its owner")
	}
	edit("c")
	load("") // no owner: kept by age
	if diff := cmp.Diff([]string{"b", "c"}, held()); diff != "" {
		t.Errorf("after a load without owner (-want +got):\n%s", diff)
	}
	l.Forget("sync-1")
	if diff := cmp.Diff([]string{"b", "c"}, held()); diff != "" {
		t.Errorf("sync-2 still uses render b (-want +got):\n%s", diff)
	}
	l.Forget("sync-2")
	if diff := cmp.Diff([]string{"c"}, held()); diff != "" {
		t.Errorf("after both owners are forgotten (-want +got):\n%s", diff)
	}
}

// TestLoadWithoutRenderCache: a Loader made to keep no render (a command that loads once)
// writes none out, and every load renders.
func TestLoadWithoutRenderCache(t *testing.T) {
	dir := writeTree(t, map[string]string{"apps/a.yaml": cm("a", "apps")})
	l := NewLoaderSized(t.TempDir(), -1)
	src := Source{Dir: dir, Path: "apps"}
	for range 2 {
		if b, err := l.Load(t.Context(), src, DefaultLoadOptions()); err != nil || len(b.Objects) != 1 {
			t.Fatalf("Load: %v", err)
		}
	}
	if l.cache.renders != 0 || len(l.cache.entries) != 0 {
		t.Errorf("%d renders kept by a Loader that keeps none", l.cache.renders)
	}
}

// TestLoadUnneeded: a render the cache holds is returned without its objects when the
// caller's Unneeded says so for its Key, and whole when it does not; a render made by the
// Load itself is never Unloaded, nor is Unneeded asked about it.
func TestLoadUnneeded(t *testing.T) {
	dir := writeTree(t, map[string]string{"apps/a.yaml": cm("a", "apps")})
	l := NewLoader(t.TempDir())
	src := Source{Dir: dir, Path: "apps"}
	var asked []string
	opts := DefaultLoadOptions()
	opts.Unneeded = func(key string) bool { asked = append(asked, key); return true }
	first, err := l.Load(t.Context(), src, opts)
	if err != nil {
		t.Fatal(err)
	}
	if first.Unloaded || len(first.Objects) != 1 || len(asked) != 0 {
		t.Fatalf("a fresh render: Unloaded %v, %d objects, Unneeded asked %d times; want it whole, not asked", first.Unloaded, len(first.Objects), len(asked))
	}
	second, err := l.Load(t.Context(), src, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !second.Unloaded || second.Objects != nil || second.Own != nil || second.Key != first.Key || second.Revision != first.Revision ||
		!slices.Equal(asked, []string{first.Key}) {
		t.Errorf("a kept render the caller does not need: Unloaded %v, %d objects, Key %q (want %q), asked %v",
			second.Unloaded, len(second.Objects), second.Key, first.Key, asked)
	}
	opts.Unneeded = func(string) bool { return false }
	third, err := l.Load(t.Context(), src, opts)
	if err != nil {
		t.Fatal(err)
	}
	if third.Unloaded || len(third.Objects) != 1 {
		t.Errorf("a kept render the caller needs: Unloaded %v, %d objects", third.Unloaded, len(third.Objects))
	}
}

// TestLoadEncoded: a load asked for JSON (LoadOptions.Encoded) holds each object as the
// document a decoded load's object comes from, whether the render is new, kept, or too
// large to be kept, and a number written 3.0 loads alike both ways.
func TestLoadEncoded(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"apps/a.yaml": cm("a", "apps"),
		"apps/b.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n  namespace: apps\n  annotations:\n    n: \"x<y\"\nreplicas: 3.0\n",
	})
	src := Source{Dir: dir, Path: "apps"}
	decodedOpts, encodedOpts := DefaultLoadOptions(), DefaultLoadOptions()
	encodedOpts.Encoded = true
	want, err := NewLoader(t.TempDir()).Load(t.Context(), src, decodedOpts)
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, b *Bundle) {
		t.Helper()
		if b.Objects != nil || b.Own != nil || len(b.Docs) != len(want.Objects) || b.Key != want.Key || !slices.Equal(b.Origins, want.Origins) {
			t.Fatalf("%s: %d objects, %d docs (want %d), key %q (want %q), origins %v", what, len(b.Objects), len(b.Docs), len(want.Objects), b.Key, want.Key, b.Origins)
		}
		d, err := b.Decoded()
		if err != nil {
			t.Fatal(err)
		}
		if d.Docs != nil || len(d.Own) != len(d.Objects) || !d.Own[0] {
			t.Errorf("%s: decoded bundle keeps docs %v or lacks Own %v", what, d.Docs != nil, d.Own)
		}
		for i := range want.Objects {
			if !reflect.DeepEqual(d.Objects[i].Object, want.Objects[i].Object) {
				t.Errorf("%s: object %d decodes as %v, want %v", what, i, d.Objects[i].Object, want.Objects[i].Object)
			}
		}
	}
	l := NewLoader(t.TempDir())
	fresh, err := l.Load(t.Context(), src, encodedOpts)
	if err != nil {
		t.Fatal(err)
	}
	check("a new render", fresh)
	kept, err := l.Load(t.Context(), src, encodedOpts)
	if err != nil {
		t.Fatal(err)
	}
	check("a kept render", kept)
	tooLarge, err := NewLoaderSized(t.TempDir(), 1).Load(t.Context(), src, encodedOpts)
	if err != nil {
		t.Fatal(err)
	}
	check("a render larger than the cache", tooLarge)
	if again, err := l.Load(t.Context(), src, decodedOpts); err != nil || again.Docs != nil || len(again.Objects) != len(want.Objects) {
		t.Errorf("a decoded load of a render kept: %d docs, %d objects, %v", len(again.Docs), len(again.Objects), err)
	}
}
