package diskcache

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/converge-dev/converge/sources/diskuse"
	"github.com/converge-dev/converge/sources/internal/fsfault"
)

// TestLockWaitEndsWithContext: a writer waiting for another writer of the same entry gives
// up when its own context ends; another entry never waits.
func TestLockWaitEndsWithContext(t *testing.T) {
	c := New(t.TempDir())
	unlock, err := c.Lock(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if _, err := c.Lock(ctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second lock: %v, want the context's deadline", err)
	}
	other, err := c.Lock(t.Context(), "k2")
	if err != nil {
		t.Fatalf("another entry waited for k: %v", err)
	}
	other()
	unlock()
	if n := c.Locks(); n != 0 {
		t.Errorf("%d locks left after every writer released, want 0", n)
	}
}

// TestAddEvictsLeastRecentlyUsedFreeEntry: past the quota the least recently used entry
// no reader holds goes, a held one stays, and an entry over the quota alone is refused and
// removed; a temporary folder an earlier process left is removed on first use.
func TestAddEvictsLeastRecentlyUsedFreeEntry(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, TmpPrefix+"half"), 0o700); err != nil {
		t.Fatal(err)
	}
	c := New(dir)
	put := func(key string, bytes int) {
		t.Helper()
		if err := os.MkdirAll(c.Path(key), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(c.Path(key), "f"), []byte(strings.Repeat("x", bytes)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	hour := time.Now().Add(time.Hour)
	put("held", 100)
	if _, ok := c.Add("held", hour, 20_000); !ok {
		t.Fatal("held refused")
	}
	put("free", 100)
	c.Add("free", time.Time{}, 20_000)
	put("new", 100)
	c.Add("new", time.Time{}, 20_000)
	if _, err := os.Stat(c.Path("held")); err != nil {
		t.Errorf("the held entry was removed: %v", err)
	}
	if c.Lookup("free", time.Time{}) {
		t.Error("the least recently used free entry is still cached")
	}
	if _, err := os.Stat(filepath.Join(dir, TmpPrefix+"half")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a temporary folder left by an earlier process is still there (%v)", err)
	}
	put("huge", 30_000)
	if _, ok := c.Add("huge", time.Time{}, 20_000); ok {
		t.Error("an entry over the quota alone was accepted")
	}
	if _, err := os.Stat(c.Path("huge")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused entry is still on disk (%v)", err)
	}
}

// TestEvictionStoppedPartWayLeavesNoPartialEntry: an evicted entry whose removal stops
// part-way (here a file that cannot be removed; a process killed in the middle leaves the
// same) is gone under its key, so the next process's cache does not serve what is left of
// it; what is left is swept once it can be.
func TestEvictionStoppedPartWayLeavesNoPartialEntry(t *testing.T) {
	dir := t.TempDir()
	c := New(dir)
	put := func(key string) {
		t.Helper()
		if err := os.MkdirAll(c.Path(key), 0o700); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"a", "b", "c", "d"} {
			if err := os.WriteFile(filepath.Join(c.Path(key), name), []byte(strings.Repeat("x", 5000)), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	put("old")
	c.Add("old", time.Time{}, 60_000)
	var stuck string
	for _, name := range []string{"a", "b", "c", "d"} {
		stuck = filepath.Join(c.Path("old"), name)
	}
	fsfault.Undeletable(t, dir, stuck)
	put("new")
	c.Add("new", time.Time{}, 60_000)

	if again := New(dir); again.Lookup("old", time.Time{}) {
		entries, _ := os.ReadDir(c.Path("old"))
		t.Fatalf("the next process serves the evicted entry, of which %d of 4 files are left", len(entries))
	}
	if !New(dir).Lookup("new", time.Time{}) {
		t.Fatal("the entry just added is not served")
	}
	left, _ := filepath.Glob(filepath.Join(dir, TmpPrefix+"rm-*"))
	if len(left) != 1 {
		t.Fatalf("%d folders left by the stopped removal, want 1: %v", len(left), left)
	}
	// The next process sweeps it once it can be removed.
	if err := fsfault.Release(dir); err != nil {
		t.Fatal(err)
	}
	New(dir).Lookup("new", time.Time{})
	if _, err := os.Stat(left[0]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the stopped removal's folder is still there (%v)", err)
	}
}

// TestEvictionDeletesOutsideTheLock: while an evicted entry is being deleted (a large one
// takes a while), other fetches still look up and add entries: the deletion runs after the
// cache's lock is let go. Held under it, one tenant's large artifact leaving the cache
// would hold up every other tenant's fetch for as long.
func TestEvictionDeletesOutsideTheLock(t *testing.T) {
	deleting, release := make(chan string, 1), make(chan struct{})
	removeAll = func(path string) error {
		deleting <- path
		<-release
		return os.RemoveAll(path)
	}
	t.Cleanup(func() { removeAll = os.RemoveAll })
	c := New(t.TempDir())
	for _, key := range []string{"old", "other", "new"} {
		if err := os.MkdirAll(c.Path(key), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(c.Path(key), "f"), []byte(strings.Repeat("x", 20_000)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c.Add("old", time.Time{}, 0)
	c.Add("other", time.Time{}, 0)
	added := make(chan struct{})
	go func() {
		defer close(added)
		c.Add("new", time.Time{}, 50_000) // evicts "old"
	}()
	var moved string
	select {
	case moved = <-deleting:
	case <-time.After(30 * time.Second):
		t.Fatal("the entry over the quota was not evicted")
	}
	if !strings.Contains(filepath.Base(moved), TmpPrefix+"rm-") {
		t.Errorf("deleting %s, not a folder moved aside", moved)
	}
	looked := make(chan bool, 1)
	go func() { looked <- c.Lookup("other", time.Time{}) }()
	select {
	case ok := <-looked:
		if !ok {
			t.Error("the entry not evicted is not served")
		}
		if c.Lookup("old", time.Time{}) {
			t.Error("the evicted entry is served while its deletion runs")
		}
	case <-time.After(30 * time.Second):
		t.Error("a lookup waited for an eviction's deletion")
	}
	close(release)
	<-added
	if _, err := os.Stat(moved); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the evicted entry's folder is still there after its deletion (%v)", err)
	}
}

// TestEvictionThatCannotMoveKeepsTheEntry: an entry whose folder cannot be moved out of its
// place (here marked immutable) stays an entry, whole, counted and served, rather than a
// folder under its name the cache forgot, which a later fetch of it could not replace.
func TestEvictionThatCannotMoveKeepsTheEntry(t *testing.T) {
	dir := t.TempDir()
	c := New(dir)
	for _, key := range []string{"old", "new"} {
		if err := os.MkdirAll(c.Path(key), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(c.Path(key), "f"), []byte(strings.Repeat("x", 20_000)), 0o600); err != nil {
			t.Fatal(err)
		}
		if key == "old" {
			c.Add(key, time.Time{}, 0)
			fsfault.Undeletable(t, dir, c.Path(key))
		}
	}
	c.Add("new", time.Time{}, 30_000) // "old" is the one to evict, and cannot move
	if !c.Lookup("old", time.Time{}) {
		t.Error("the entry that could not be evicted is no longer served, though whole under its name")
	}
	if got, want := c.Total(), diskuse.Of(c.Path("old"))+diskuse.Of(c.Path("new")); got != want {
		t.Errorf("the cache counts %d bytes, the disk holds %d", got, want)
	}
}
