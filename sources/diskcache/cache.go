// Package diskcache keeps the entries of a source cache on disk under a quota: one folder
// per entry, named by the caller (sources/cachekey), written under a temporary name and
// renamed in place whole. Its disk is counted as the disk blocks each folder takes (files,
// folders and links, sources/diskuse): after an entry is added, the least recently used
// entries no reader holds are removed until the total fits. A reader holds an entry until
// a time it gives (its render's deadline). An entry over the quota alone is refused.
// Folders left by an earlier process are counted from the first use on, at their
// modification time; temporary ones are removed.
package diskcache

import (
	"context"
	"crypto/rand"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/converge-dev/converge/sources/diskuse"
)

// TmpPrefix names entries being written and temporary files; they become an entry by a
// rename, and are removed when a later process finds them.
const TmpPrefix = "tmp-"

type entry struct {
	size      int64
	used      time.Time
	heldUntil time.Time
}

// Cache is a cache directory. It is safe for concurrent use.
type Cache struct {
	dir     string
	mu      sync.Mutex
	scanned bool
	entries map[string]*entry
	// locks serialize the writers of one entry (a channel of one token, so a wait ends
	// with its ctx); a lock lives while someone holds or waits for it, so the map stays as
	// small as the fetches in flight and unrelated entries never wait for each other.
	locks map[string]*lock
}

type lock struct {
	token chan struct{}
	refs  int
}

// New returns the cache of directory dir (created on first write).
func New(dir string) *Cache {
	return &Cache{dir: dir, locks: map[string]*lock{}}
}

// Dir returns the cache directory.
func (c *Cache) Dir() string { return c.dir }

// Path returns the folder of entry key.
func (c *Cache) Path(key string) string { return filepath.Join(c.dir, key) }

// scan reads the folders a previous process left, once; entries it left half-way go.
func (c *Cache) scan() {
	if c.scanned {
		return
	}
	c.scanned, c.entries = true, map[string]*entry{}
	list, _ := os.ReadDir(c.dir)
	for _, e := range list {
		p := filepath.Join(c.dir, e.Name())
		if strings.HasPrefix(e.Name(), TmpPrefix) {
			_ = os.RemoveAll(p)
			continue
		}
		info, err := e.Info()
		if err != nil || !e.IsDir() {
			continue
		}
		c.entries[e.Name()] = &entry{size: diskuse.Of(p), used: info.ModTime()}
	}
}

// Lookup returns whether key is cached, and holds it until until.
func (c *Cache) Lookup(key string, until time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.scan()
	e, ok := c.entries[key]
	if !ok {
		return false
	}
	if _, err := os.Stat(c.Path(key)); err != nil {
		delete(c.entries, key)
		return false
	}
	e.used = time.Now()
	e.heldUntil = later(e.heldUntil, until)
	return true
}

// Add records the folder of key (renamed in place by the caller), measured on disk, held
// until until, and removes least recently used free entries past quota (0: no limit). It
// returns the entry's size and false when key alone is over the quota (the entry is then
// removed). The entries it removes leave their places under the cache's lock and are
// deleted after it: a large entry's deletion holds up no other fetch.
func (c *Cache) Add(key string, until time.Time, quota int64) (int64, bool) {
	size := diskuse.Of(c.Path(key))
	ok, removed := c.add(key, size, until, quota)
	for _, p := range removed {
		_ = removeAll(p)
	}
	return size, ok
}

// add is Add under the cache's lock; it returns where the entries it removed were moved.
func (c *Cache) add(key string, size int64, until time.Time, quota int64) (bool, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.scan()
	now := time.Now()
	c.entries[key] = &entry{size: size, used: now, heldUntil: until}
	if quota <= 0 {
		return true, nil
	}
	if size > quota {
		// Refused: never served, even when its folder could not be moved.
		tmp, _ := c.takeOut(key)
		delete(c.entries, key)
		return false, nonEmpty(tmp)
	}
	total := int64(0)
	keys := make([]string, 0, len(c.entries))
	for k, e := range c.entries {
		total += e.size
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return c.entries[a].used.Compare(c.entries[b].used) })
	var removed []string
	for _, k := range keys {
		if total <= quota {
			break
		}
		if e := c.entries[k]; k != key && !e.heldUntil.After(now) {
			if tmp, ok := c.takeOut(k); ok {
				total -= e.size
				removed = append(removed, nonEmpty(tmp)...)
			}
		}
	}
	return true, removed
}

// takeOut moves the folder of entry key out of its place (moveAside) and drops the entry.
// It returns where the folder went ("" when it was already gone) and whether it moved: a
// folder that could not be moved stays an entry, whole and counted, rather than a folder
// under its name the cache forgot. Called with mu held.
func (c *Cache) takeOut(key string) (string, bool) {
	tmp, err := moveAside(c.Path(key), TmpPrefix)
	if err != nil {
		return "", false
	}
	delete(c.entries, key)
	return tmp, true
}

// RemoveDir removes folder path so that no reader ever finds it partial under its name:
// moveAside, then the removal. A process killed, or a removal failing, part-way leaves the
// moved folder, for a sweep of tmpPrefix folders to take, never a truncated entry a later
// reader would take for whole. The error is moveAside's: once path is out of its place,
// what the removal could not delete is the sweep's. A missing path is no error.
func RemoveDir(path, tmpPrefix string) error {
	tmp, err := moveAside(path, tmpPrefix)
	if err != nil || tmp == "" {
		return err
	}
	_ = removeAll(tmp)
	return nil
}

// moveAside renames folder path to a sibling named tmpPrefix+"rm-"+random (one atomic step
// on one file system) and returns the sibling's path, for the caller to remove; "" when
// path does not exist.
func moveAside(path, tmpPrefix string) (string, error) {
	tmp := filepath.Join(filepath.Dir(path), tmpPrefix+"rm-"+rand.Text())
	if err := os.Rename(path, tmp); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil
		}
		return "", err
	}
	return tmp, nil
}

// nonEmpty is path as a list: none when it is "".
func nonEmpty(path string) []string {
	if path == "" {
		return nil
	}
	return []string{path}
}

// removeAll deletes a folder moved aside (os.RemoveAll; a test holds it up).
var removeAll = os.RemoveAll

// Total returns the bytes the cache's entries hold.
func (c *Cache) Total() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := int64(0)
	for _, e := range c.entries {
		n += e.size
	}
	return n
}

// Lock takes the lock of entry key and returns its release, or ctx's error when ctx ends
// first: a writer never waits for another one past its own deadline.
func (c *Cache) Lock(ctx context.Context, key string) (func(), error) {
	c.mu.Lock()
	l, ok := c.locks[key]
	if !ok {
		l = &lock{token: make(chan struct{}, 1)}
		c.locks[key] = l
	}
	l.refs++
	c.mu.Unlock()
	done := func() {
		c.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(c.locks, key)
		}
		c.mu.Unlock()
	}
	select {
	case l.token <- struct{}{}:
		return func() { <-l.token; done() }, nil
	case <-ctx.Done():
		done()
		return nil, ctx.Err()
	}
}

// Locks returns how many entry locks are held or waited for.
func (c *Cache) Locks() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.locks)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
