package oci

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/converge-dev/converge/sources/diskuse"
)

// The cache directory holds one folder per registry, repository, credentials, manifest
// digest and layer selection (named by Fetcher.keyer): the extracted artifact. Its disk is
// bounded by FetchOptions.CacheQuota, counted as the disk blocks the extracted folder
// takes (files, folders and links, sources/diskuse): after a fetch extracts a new
// artifact, the least recently used folders no fetch holds are removed until the total
// fits. A fetch holds its folder until the deadline of its ctx (the caller renders it
// under that ctx). An artifact over the quota alone fails its fetch (ErrTooLarge). Folders
// left by an earlier process are counted from the first fetch on, at their modification
// time.

// tmpPrefix names extractions in progress; they become an entry by a rename.
const tmpPrefix = "tmp-"

type cacheEntry struct {
	size      int64
	used      time.Time
	heldUntil time.Time
}

type cache struct {
	dir     string
	mu      sync.Mutex
	scanned bool
	entries map[string]*cacheEntry
}

// scan reads the folders a previous process left, once; extractions it left half-way go.
func (c *cache) scan() {
	if c.scanned {
		return
	}
	c.scanned, c.entries = true, map[string]*cacheEntry{}
	list, _ := os.ReadDir(c.dir)
	for _, e := range list {
		p := filepath.Join(c.dir, e.Name())
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			_ = os.RemoveAll(p)
			continue
		}
		info, err := e.Info()
		if err != nil || !e.IsDir() {
			continue
		}
		c.entries[e.Name()] = &cacheEntry{size: dirSize(p), used: info.ModTime()}
	}
}

// lookup returns whether key is cached, and holds it until until.
func (c *cache) lookup(key string, until time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.scan()
	e, ok := c.entries[key]
	if !ok {
		return false
	}
	if _, err := os.Stat(filepath.Join(c.dir, key)); err != nil {
		delete(c.entries, key)
		return false
	}
	e.used = time.Now()
	e.heldUntil = later(e.heldUntil, until)
	return true
}

// add records key of size bytes, held until until, and removes least recently used free
// entries past quota (0: no limit). It returns false when key alone is over the quota (the
// entry is then removed).
func (c *cache) add(key string, size int64, until time.Time, quota int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.scan()
	now := time.Now()
	c.entries[key] = &cacheEntry{size: size, used: now, heldUntil: until}
	if quota <= 0 {
		return true
	}
	if size > quota {
		c.remove(key)
		return false
	}
	total := int64(0)
	keys := make([]string, 0, len(c.entries))
	for k, e := range c.entries {
		total += e.size
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return c.entries[a].used.Compare(c.entries[b].used) })
	for _, k := range keys {
		if total <= quota {
			break
		}
		if e := c.entries[k]; k != key && !e.heldUntil.After(now) {
			total -= e.size
			c.remove(k)
		}
	}
	return true
}

func (c *cache) remove(key string) {
	delete(c.entries, key)
	_ = os.RemoveAll(filepath.Join(c.dir, key))
}

// total returns the bytes the cache's entries hold.
func (c *cache) total() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := int64(0)
	for _, e := range c.entries {
		n += e.size
	}
	return n
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func dirSize(dir string) int64 { return diskuse.Of(dir) }
