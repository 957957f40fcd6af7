package git

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/converge-dev/converge/sources/internal/fsfault"
)

// quotaRepo serves a repository of one incompressible file of size bytes over HTTP.
func quotaRepo(t *testing.T, size int) Repository {
	t.Helper()
	data := make([]byte, size)
	_, _ = rand.Read(data)
	return serveFile(t, data)
}

// serveFile serves a repository of one file over HTTP.
func serveFile(t *testing.T, data []byte) Repository {
	t.Helper()
	r := newTestRepo(t)
	r.commit("one", map[string]string{"data.bin": string(data)})
	r.push()
	url, _ := serveHTTP(t, r.root, nil)
	return Repository{URL: url, Ref: Ref{Branch: "main"}}
}

// entries returns which of repos have an entry in f's cache.
func entries(t *testing.T, f *Fetcher, repos map[string]Repository) []string {
	t.Helper()
	var out []string
	for _, name := range []string{"a", "b", "c"} {
		key, err := f.cacheKey(repos[name])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(f.CacheDir(), key)); err == nil {
			out = append(out, name)
		}
	}
	return out
}

func fetchQuota(t *testing.T, f *Fetcher, repo Repository, quota int64, owner string) error {
	t.Helper()
	// No deadline on ctx: its checkout is not reserved for a reader (see reserve), and may
	// be evicted at once.
	opts := loopbackOptions()
	opts.CacheQuota, opts.Owner = quota, owner
	_, err := f.Fetch(t.Context(), repo, opts)
	return err
}

// TestFetchCacheQuota: the git cache stays under its quota by removing the least recently
// used entries, never one a fetch holds; a repository over the quota alone fails its fetch
// naming the quota. Without it, entries were never removed: three repositories took three
// entries whatever the quota.
func TestFetchCacheQuota(t *testing.T) {
	repos := map[string]Repository{"a": quotaRepo(t, 1<<20), "b": quotaRepo(t, 1<<20), "c": quotaRepo(t, 1<<20)}
	f := NewFetcher(t.TempDir())
	if err := fetchQuota(t, f, repos["a"], 0, ""); err != nil {
		t.Fatal(err)
	}
	key, _ := f.cacheKey(repos["a"])
	one := dirSize(filepath.Join(f.CacheDir(), key))
	quota := one * 5 / 2                           // two entries fit, not three
	for _, name := range []string{"b", "a", "c"} { // a used after b: b is the oldest
		if err := fetchQuota(t, f, repos[name], quota, ""); err != nil {
			t.Fatalf("fetch %s: %v", name, err)
		}
	}
	if got := strings.Join(entries(t, f, repos), ","); got != "a,c" {
		t.Errorf("entries after fetching b, a, c under a quota of two: %s, want a,c (b least recently used)", got)
	}
	if total := dirSize(f.CacheDir()); total > quota {
		t.Errorf("cache holds %d bytes, over its quota of %d", total, quota)
	}

	// a is now the oldest, but a fetch holds it: c goes instead.
	unlock, err := f.lock(t.Context(), key, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := fetchQuota(t, f, repos["b"], quota, ""); err != nil {
		t.Fatalf("fetch b: %v", err)
	}
	unlock()
	if got := strings.Join(entries(t, f, repos), ","); got != "a,b" {
		t.Errorf("entries after fetching b while a is held: %s, want a,b (the held entry kept)", got)
	}

	// A repository larger than the quota alone fails, and leaves nothing behind: a download
	// over half the quota is stopped; a small pack whose checkout then takes the entry over
	// the quota is removed.
	text := serveFile(t, []byte(strings.Repeat("compressible text\n", 1<<16)))
	for _, c := range []struct {
		repo  Repository
		quota int64
		want  string
	}{
		{repos["c"], one / 2, "over a quarter of the git cache quota (--git-cache-quota)"},
		{text, one / 2, "over half its quota of"},
	} {
		err = fetchQuota(t, f, c.repo, c.quota, "")
		if !errors.Is(err, ErrTooLarge) || !IsTerminal(err) || !strings.Contains(err.Error(), c.want) ||
			!strings.Contains(err.Error(), "--git-cache-quota") {
			t.Fatalf("fetch over the quota of %d alone: %v, want a terminal ErrTooLarge containing %q", c.quota, err, c.want)
		}
		if total := dirSize(f.CacheDir()); total > c.quota {
			t.Errorf("cache holds %d bytes after a fetch over its quota of %d", total, c.quota)
		}
	}
}

// TestFetchForgetRemovesEntry: forgetting the only owner of a cache entry removes it;
// an entry another owner still uses stays. Without it, entries were never removed.
func TestFetchForgetRemovesEntry(t *testing.T) {
	repos := map[string]Repository{"a": quotaRepo(t, 1<<10), "b": quotaRepo(t, 1<<10)}
	f := NewFetcher(t.TempDir())
	for _, fetch := range []struct{ repo, owner string }{{"a", "apps/one"}, {"b", "apps/two"}, {"b", "apps/three"}} {
		if err := fetchQuota(t, f, repos[fetch.repo], 0, fetch.owner); err != nil {
			t.Fatal(err)
		}
	}
	f.Forget("apps/one")
	f.Forget("apps/two")
	if got := strings.Join(entries(t, f, repos), ","); got != "b" {
		t.Errorf("entries after forgetting one and two: %s, want b (still used by three)", got)
	}
	f.Forget("apps/three")
	if got := entries(t, f, repos); len(got) != 0 {
		t.Errorf("entries after forgetting every owner: %v, want none", got)
	}
}

// TestFetchCacheQuotaKeepsReservedCheckouts: an entry with a checkout reserved for a
// render still running (its fetch's ctx has not reached its deadline) is not evicted, even
// when it is the least recently used.
func TestFetchCacheQuotaKeepsReservedCheckouts(t *testing.T) {
	repos := map[string]Repository{"a": quotaRepo(t, 1<<20), "b": quotaRepo(t, 1<<20), "c": quotaRepo(t, 1<<20)}
	f := NewFetcher(t.TempDir())
	ctx, cancel := context.WithTimeout(t.Context(), time.Hour) // a render reads a's checkout
	defer cancel()
	opts := loopbackOptions()
	if _, err := f.Fetch(ctx, repos["a"], opts); err != nil {
		t.Fatal(err)
	}
	key, _ := f.cacheKey(repos["a"])
	quota := dirSize(filepath.Join(f.CacheDir(), key)) * 5 / 2
	for _, name := range []string{"b", "c"} {
		if err := fetchQuota(t, f, repos[name], quota, ""); err != nil {
			t.Fatalf("fetch %s: %v", name, err)
		}
	}
	if got := strings.Join(entries(t, f, repos), ","); got != "a,c" {
		t.Errorf("entries: %s, want a,c (a reserved for its reader, b the least recently used after it)", got)
	}
}

// TestFetchCacheQuotaFullOfReservedEntries: when every other entry is reserved for a render,
// the fetch that took the cache over its quota fails (transient, naming the quota) and gives
// its room back. Without it: the fetch succeeded and the cache stayed over its quota.
func TestFetchCacheQuotaFullOfReservedEntries(t *testing.T) {
	repos := map[string]Repository{"a": quotaRepo(t, 1<<20), "b": quotaRepo(t, 1<<20), "c": quotaRepo(t, 1<<20)}
	f := NewFetcher(t.TempDir())
	ctx, cancel := context.WithTimeout(t.Context(), time.Hour) // renders read a's and b's checkouts
	defer cancel()
	if _, err := f.Fetch(ctx, repos["a"], loopbackOptions()); err != nil {
		t.Fatal(err)
	}
	key, _ := f.cacheKey(repos["a"])
	quota := dirSize(filepath.Join(f.CacheDir(), key)) * 5 / 2 // two entries fit, not three
	opts := loopbackOptions()
	opts.CacheQuota = quota
	if _, err := f.Fetch(ctx, repos["b"], opts); err != nil {
		t.Fatal(err)
	}
	err := fetchQuota(t, f, repos["c"], quota, "")
	if err == nil || IsTerminal(err) || !strings.Contains(err.Error(), "--git-cache-quota") {
		t.Fatalf("fetch past the quota with every other entry reserved: %v, want a transient error naming --git-cache-quota", err)
	}
	if total := dirSize(f.CacheDir()); total > quota {
		t.Errorf("cache holds %d bytes, over its quota of %d", total, quota)
	}
	if got := strings.Join(entries(t, f, repos), ","); !strings.HasPrefix(got, "a,b") {
		t.Errorf("entries: %s, want a and b kept (reserved)", got)
	}
}

// TestForgetSparesAnEntryTakenUpAgain: Forget's removal ignores reserved checkouts only while
// the entry is still nobody's; one another Sync's fetch took up in the meantime keeps the
// checkout its render is about to read. Without it: the forced removal deleted it.
func TestForgetSparesAnEntryTakenUpAgain(t *testing.T) {
	repo := quotaRepo(t, 1<<10)
	f := NewFetcher(t.TempDir())
	ctx, cancel := context.WithTimeout(t.Context(), time.Hour) // a render reads the checkout
	defer cancel()
	opts := loopbackOptions()
	opts.Owner = "apps/two"
	if _, err := f.Fetch(ctx, repo, opts); err != nil {
		t.Fatal(err)
	}
	key, _ := f.cacheKey(repo)
	// As Forget of another owner decided the entry was an orphan just before apps/two's
	// fetch took it up, then removed it.
	if f.evict(key, true) {
		t.Errorf("the entry apps/two fetched and reserved was removed by a forced eviction")
	}
	if _, err := os.Stat(filepath.Join(f.CacheDir(), key)); err != nil {
		t.Errorf("entry: %v", err)
	}
}

// TestFetchCacheQuotaConcurrentFetches: fetches in flight together claim what they write
// from the quota before writing it, so the cache never holds more than its quota, not even
// for a moment, and a fetch that finds no room fails transiently (ErrCacheFull). Without
// it: four fetches at once each checked the quota only when done, and the cache
// reached more than twice its quota while they ran.
func TestFetchCacheQuotaConcurrentFetches(t *testing.T) {
	const n = 4
	repos := make([]Repository, n)
	for i := range repos {
		repos[i] = quotaRepo(t, 2<<20)
	}
	f := NewFetcher(t.TempDir())
	const quota = 10 << 20 // one fetch writes about 4 MiB at its peak (a pack twice, then a pack and a checkout)
	// Small files (a repository's config, refs, HEAD) are not claimed.
	const slack = 64 << 10
	var peak atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			peak.Store(max(peak.Load(), dirSize(f.CacheDir())))
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	errs := make(chan error, n)
	for i, repo := range repos {
		go func() {
			opts := loopbackOptions()
			opts.CacheQuota, opts.Tenant = quota, "team-"+strconv.Itoa(i)
			_, err := f.Fetch(t.Context(), repo, opts)
			errs <- err
		}()
	}
	ok := 0
	for range n {
		switch err := <-errs; {
		case err == nil:
			ok++
		case !errors.Is(err, ErrCacheFull) || IsTerminal(err) || !strings.Contains(err.Error(), "--git-cache-quota"):
			t.Errorf("fetch: %v, want success or a transient ErrCacheFull naming --git-cache-quota", err)
		}
	}
	close(stop)
	<-sampled
	if ok == 0 {
		t.Error("no fetch succeeded, want at least one")
	}
	if p := peak.Load(); p > quota+slack {
		t.Errorf("the cache held %d bytes while the fetches ran, over its quota of %d", p, quota)
	}
	if total := dirSize(f.CacheDir()); total > quota {
		t.Errorf("the cache holds %d bytes after the fetches, over its quota of %d", total, quota)
	}
}

// TestFetchReleasedCheckoutIsEvictable: a checkout whose reader released it is no longer
// reserved, so its entry may be evicted to make room although the fetch's deadline is
// hours away; one still held is kept. Without it: a reservation lasted until the
// fetch's deadline whatever the reader did, and the next fetch failed with the cache full.
func TestFetchReleasedCheckoutIsEvictable(t *testing.T) {
	repos := map[string]Repository{"a": quotaRepo(t, 1<<20), "b": quotaRepo(t, 1<<20), "c": quotaRepo(t, 1<<20)}
	f := NewFetcher(t.TempDir())
	ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
	defer cancel()
	a, err := f.Fetch(ctx, repos["a"], loopbackOptions())
	if err != nil {
		t.Fatal(err)
	}
	key, _ := f.cacheKey(repos["a"])
	quota := dirSize(filepath.Join(f.CacheDir(), key)) * 5 / 2 // two entries fit, not three
	opts := loopbackOptions()
	opts.CacheQuota = quota
	b, err := f.Fetch(ctx, repos["b"], opts)
	if err != nil {
		t.Fatal(err)
	}
	a.Release()
	a.Release() // a second call changes nothing
	if _, err := f.Fetch(ctx, repos["c"], opts); err != nil {
		t.Fatalf("fetch with a's checkout released: %v, want a evicted to make room", err)
	}
	if got := strings.Join(entries(t, f, repos), ","); got != "b,c" {
		t.Errorf("entries: %s, want b,c (b still held by its reader)", got)
	}
	b.Release()
}

// TestFetchClaimShares: one fetch may claim at most half the quota (terminal: the repository
// is too large for this cache), and one namespace's fetches in flight together at most half
// (transient), while another namespace's fetch still finds room; a refused claim is taken
// back.
func TestFetchClaimShares(t *testing.T) {
	f := NewFetcher(t.TempDir())
	const quota = 100 << 20
	if err := f.claim("a1", "team-a", 60<<20, quota); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "over half its quota") {
		t.Fatalf("one fetch claiming 60%% of the quota: %v, want a terminal ErrTooLarge", err)
	}
	if err := f.claim("a1", "team-a", 30<<20, quota); err != nil {
		t.Fatalf("claim of 30%% after a refused one: %v, want it granted (the refused claim taken back)", err)
	}
	err := f.claim("a2", "team-a", 30<<20, quota)
	if !errors.Is(err, ErrCacheFull) || IsTerminal(err) || !strings.Contains(err.Error(), `namespace "team-a"`) {
		t.Fatalf("a second fetch of team-a taking it to 60%%: %v, want a transient ErrCacheFull naming the namespace", err)
	}
	if err := f.claim("b1", "team-b", 30<<20, quota); err != nil {
		t.Fatalf("team-b's fetch beside team-a's: %v, want room", err)
	}
	if got := f.total(); got != 60<<20 {
		t.Errorf("claimed in all: %d, want %d", got, 60<<20)
	}
}

// TestFetchCacheQuotaCountsBlocks: the quota counts the disk blocks a checkout takes, not
// its files' sizes: a commit of 400 one-byte files, each in its own folder, takes more than
// 3 MB on disk and is refused under a 2 MiB quota. Without it: it was counted as 400
// bytes and written whole.
func TestFetchCacheQuotaCountsBlocks(t *testing.T) {
	files := map[string]string{}
	for i := range 400 {
		files[fmt.Sprintf("d%03d/f", i)] = "x"
	}
	r := newTestRepo(t)
	r.commit("many", files)
	r.push()
	url, _ := serveHTTP(t, r.root, nil)
	f := NewFetcher(t.TempDir())
	const quota = 2 << 20
	err := fetchQuota(t, f, Repository{URL: url, Ref: Ref{Branch: "main"}}, quota, "")
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "--git-cache-quota") {
		t.Fatalf("fetch of 400 folders under a 2 MiB quota: %v, want a terminal ErrTooLarge naming the quota", err)
	}
	if total := dirSize(f.CacheDir()); total > quota {
		t.Errorf("the cache takes %d bytes on disk, over its quota of %d", total, quota)
	}
}

// TestFetchQuotaSweepsStoppedRemovals: what an earlier process's removals left part-way (an
// evicted entry's folder, a repository's) is neither an entry of the cache nor counted
// against the quota: the first fetch under a quota removes it.
func TestFetchQuotaSweepsStoppedRemovals(t *testing.T) {
	repo := quotaRepo(t, 1<<20)
	cacheDir := t.TempDir()
	first := NewFetcher(cacheDir)
	if err := fetchQuota(t, first, repo, 0, ""); err != nil {
		t.Fatal(err)
	}
	key, err := first.cacheKey(repo)
	if err != nil {
		t.Fatal(err)
	}
	entry := filepath.Join(cacheDir, key)
	left := []string{filepath.Join(cacheDir, tmpPrefix+"rm-entry"), filepath.Join(entry, tmpPrefix+"rm-repository")}
	for _, dst := range left {
		if err := os.CopyFS(dst, os.DirFS(filepath.Join(entry, "shallow.git"))); err != nil {
			t.Fatal(err)
		}
	}
	size := dirSize(entry) - dirSize(left[1])

	f := NewFetcher(cacheDir)
	if err := fetchQuota(t, f, repo, 100<<20, ""); err != nil {
		t.Fatal(err)
	}
	for _, p := range left {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s, left by a stopped removal, is still there (%v)", p, err)
		}
	}
	if got := f.total(); got != size {
		t.Errorf("the cache counts %d bytes, want %d: the one entry's", got, size)
	}
}

// TestFetchQuotaRetriesAFailedEviction: an evicted entry whose removal failed after it left
// its place is not served, and the next fetch that writes tries its removal again.
func TestFetchQuotaRetriesAFailedEviction(t *testing.T) {
	repos := map[string]Repository{"a": quotaRepo(t, 1<<20), "b": quotaRepo(t, 1<<20), "c": quotaRepo(t, 1<<20)}
	cacheDir := t.TempDir()
	f := NewFetcher(cacheDir)
	if err := fetchQuota(t, f, repos["a"], 0, ""); err != nil {
		t.Fatal(err)
	}
	key, err := f.cacheKey(repos["a"])
	if err != nil {
		t.Fatal(err)
	}
	quota := dirSize(filepath.Join(cacheDir, key)) * 5 / 2 // two entries fit, not three
	packs, _ := filepath.Glob(filepath.Join(cacheDir, key, "shallow.git", "objects", "pack", "*.pack"))
	if len(packs) == 0 {
		t.Fatal("no pack in the entry")
	}
	fsfault.Undeletable(t, cacheDir, packs[0])
	for _, name := range []string{"b", "c"} {
		if err := fetchQuota(t, f, repos[name], quota, ""); err != nil {
			t.Fatal(err)
		}
	}
	if got := strings.Join(entries(t, f, repos), ","); got != "b,c" {
		t.Fatalf("entries: %s, want b,c (a evicted, its removal stopped part-way)", got)
	}
	left, _ := filepath.Glob(filepath.Join(cacheDir, tmpPrefix+"rm-*"))
	if len(left) != 1 {
		t.Fatalf("%d folders left by the failed removal, want 1", len(left))
	}
	if err := fsfault.Release(cacheDir); err != nil {
		t.Fatal(err)
	}
	if err := fetchQuota(t, f, quotaRepo(t, 1<<10), quota, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(left[0]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the failed removal's folder is still there after the next fetch that wrote (%v)", err)
	}
}
