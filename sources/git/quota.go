package git

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/converge-dev/converge/sources/diskuse"
)

// The cache directory holds one entry per URL and credentials (a folder named by
// cacheKey). Its disk is bounded by FetchOptions.CacheQuota: after a fetch that wrote to
// its entry, the entries' sizes are summed and, over the quota, whole entries are removed,
// least recently used first, among those no fetch holds and no reader has reserved a
// checkout of. A fetch whose own entry is over the quota alone fails (ErrTooLarge naming
// the quota) and leaves of its entry only what readers have reserved. An entry whose last
// owner is forgotten (a deleted Sync, see Forget) is removed at once when it is free, else
// at the next fetch that checks the quota.
//
// Fetches in flight count too: before a fetch writes to its entry (a received pack, its
// copy and index in the repository, a checkout's files and folders, in whole blocks) it
// claims the disk from the quota, evicting free entries to make room, and a claim that does
// not fit fails the fetch (transient: "the git cache is full") before the bytes reach the
// disk. So several fetches at once never fill the cache volume either. One fetch, and one
// tenant's fetches together, claim at most half the quota (see claim). When the fetch
// ends, its claims are replaced by its entry's measured size. Sizes are disk blocks, so a
// commit of many tiny files is counted as what it takes.

// quota is the Fetcher's view of its cache's entries.
type quota struct {
	mu       sync.Mutex
	scanned  bool
	sizes    map[string]int64     // entry → bytes on disk
	used     map[string]time.Time // entry → last fetch
	owners   map[string]map[string]bool
	ownerOf  map[string]string // owner → the entry of its last fetch
	orphans  map[string]bool   // entries whose last owner was forgotten
	claimed  map[string]int64  // entry → bytes its fetch in flight claimed (see claim)
	claimant map[string]string // entry → the tenant of its fetch in flight
}

// own records that owner's last fetch used entry key.
func (f *Fetcher) own(owner, key string) {
	if owner == "" {
		return
	}
	q := &f.quota
	q.mu.Lock()
	defer q.mu.Unlock()
	if prev, ok := q.ownerOf[owner]; ok && prev != key {
		delete(q.owners[prev], owner)
	}
	if q.ownerOf == nil {
		q.ownerOf, q.owners = map[string]string{}, map[string]map[string]bool{}
	}
	q.ownerOf[owner] = key
	if q.owners[key] == nil {
		q.owners[key] = map[string]bool{}
	}
	q.owners[key][owner] = true
	delete(q.orphans, key)
}

// Forget drops owner (FetchOptions.Owner, a Sync that is gone): the cache entry of its last
// fetch is removed when no other owner's last fetch used it, at once when no fetch holds
// it, else by the next fetch (once no reader has reserved a checkout of it).
func (f *Fetcher) Forget(owner string) {
	q := &f.quota
	q.mu.Lock()
	key, ok := q.ownerOf[owner]
	if !ok {
		q.mu.Unlock()
		return
	}
	delete(q.ownerOf, owner)
	delete(q.owners[key], owner)
	orphan := len(q.owners[key]) == 0
	if orphan {
		delete(q.owners, key)
		if q.orphans == nil {
			q.orphans = map[string]bool{}
		}
		q.orphans[key] = true
	}
	q.mu.Unlock()
	if orphan {
		// Its reserved checkouts were for its owners' renders, which are over: a Sync is
		// reconciled by one worker at a time, and forgotten by the last.
		_ = f.evict(key, true)
	}
}

// account records the fetch of entry key (which the caller holds) and enforces the quota.
// wrote says whether the fetch changed the entry on disk.
func (f *Fetcher) account(key string, wrote bool, limit int64) error {
	dir := filepath.Join(f.cacheDir, key)
	now := time.Now()
	_ = os.Chtimes(dir, now, now) // the entry's last use, across restarts
	for _, orphan := range f.orphaned(key) {
		_ = f.evict(orphan, false)
	}
	if limit <= 0 {
		return nil
	}
	f.scanOnce()
	q := &f.quota
	q.mu.Lock()
	q.used[key] = now
	_, known := q.sizes[key]
	_, claimed := q.claimed[key]
	q.mu.Unlock()
	if wrote || !known || claimed {
		f.measure(key)
	}
	if wrote {
		sweep(f.cacheDir) // entries whose removal failed after their rename: tried again
	}
	for _, victim := range f.victims(key) {
		if f.total() <= limit {
			break
		}
		_ = f.evict(victim, false)
	}
	q.mu.Lock()
	own := q.sizes[key]
	q.mu.Unlock()
	switch {
	case own > limit:
		f.shrink(key, dir)
		return fmt.Errorf("%w: the repository takes %d bytes in the git cache, over its quota of %d bytes (--git-cache-quota)", ErrTooLarge, own, limit)
	case f.total() > limit:
		// Every other entry is held by a fetch or reserved by a render: this fetch, which
		// passed the quota, gives its room back rather than let the volume fill (transient:
		// the others' reservations end with their renders).
		f.shrink(key, dir)
		return fmt.Errorf("the git cache is over its quota of %d bytes (--git-cache-quota) and every other entry is in use; try again later", limit)
	}
	return nil
}

// shrink removes what readers have not reserved of entry key and records its new size.
func (f *Fetcher) shrink(key, dir string) {
	removeUnreserved(dir)
	f.measure(key)
}

// measure records the size of entry key on disk, which replaces what its fetch claimed.
func (f *Fetcher) measure(key string) {
	size := dirSize(filepath.Join(f.cacheDir, key))
	q := &f.quota
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.sizes != nil {
		q.sizes[key] = size
	}
	delete(q.claimed, key)
	delete(q.claimant, key)
}

// claim counts n more bytes (n < 0: fewer) that the fetch holding entry key, for tenant,
// is about to write. One fetch may claim at most half the quota (more fails terminally:
// the repository is too large for this cache), and the fetches in flight of one tenant
// together at most half (more fails transiently), so one namespace never holds all of the
// cache's room. When the cache with every claim would pass limit, free entries are evicted
// first (as account does), and a claim that still does not fit fails transiently. A
// failed claim is taken back; what the fetch claimed before stays counted until it ends
// (settle).
func (f *Fetcher) claim(key, tenant string, n, limit int64) error {
	if limit <= 0 || n == 0 {
		return nil
	}
	f.scanOnce()
	q := &f.quota
	q.mu.Lock()
	if q.claimed == nil {
		q.claimed, q.claimant = map[string]int64{}, map[string]string{}
	}
	q.claimed[key] += n
	q.claimant[key] = tenant
	own := q.claimed[key]
	var held int64 // the tenant's fetches in flight, this one included
	for k, c := range q.claimed {
		if q.claimant[k] == tenant {
			held += c
		}
	}
	q.mu.Unlock()
	err := func() error {
		switch {
		case n < 0:
			return nil
		case own > limit/2:
			return fmt.Errorf("%w: the fetch would write %d bytes into the git cache, over half its quota of %d bytes (--git-cache-quota)", ErrTooLarge, own, limit)
		case held > limit/2:
			return fmt.Errorf("%w: the fetches in flight for namespace %q would claim %d bytes, over half its quota of %d bytes (--git-cache-quota); try again later", ErrCacheFull, tenant, held, limit)
		}
		if f.total() <= limit {
			return nil
		}
		for _, victim := range f.victims(key) {
			if f.total() <= limit {
				break
			}
			_ = f.evict(victim, false)
		}
		if total := f.total(); total > limit {
			return fmt.Errorf("%w: writing %d more bytes would take it to %d bytes, over its quota of %d bytes (--git-cache-quota), and every other entry is in use by a fetch or a render; try again later", ErrCacheFull, n, total, limit)
		}
		return nil
	}()
	if err != nil {
		q.mu.Lock()
		q.claimed[key] -= n
		q.mu.Unlock()
	}
	return err
}

// shrunk records that the fetch holding entry key removed n bytes of it (old checkouts).
func (f *Fetcher) shrunk(key string, n int64) {
	q := &f.quota
	q.mu.Lock()
	defer q.mu.Unlock()
	if s, ok := q.sizes[key]; ok && n > 0 {
		q.sizes[key] = max(s-n, 0)
	}
}

// settle ends the claims of the fetch holding entry key: what it wrote is measured, and so
// is an entry the quota does not know yet (one a failed fetch created), so that it can be
// evicted.
func (f *Fetcher) settle(key string) {
	q := &f.quota
	q.mu.Lock()
	_, claimed := q.claimed[key]
	_, known := q.sizes[key]
	unknown := q.scanned && !known
	q.mu.Unlock()
	if claimed || unknown {
		if _, err := os.Stat(filepath.Join(f.cacheDir, key)); err == nil || claimed {
			f.measure(key)
		}
	}
}

// scanOnce reads the entries on disk the first time the quota is needed.
func (f *Fetcher) scanOnce() {
	f.quota.mu.Lock()
	scanned := f.quota.scanned
	f.quota.mu.Unlock()
	if !scanned {
		f.scan()
	}
}

// scan reads the sizes and last uses of the entries on disk, once per Fetcher.
func (f *Fetcher) scan() {
	sizes, used := map[string]int64{}, map[string]time.Time{}
	sweep(f.cacheDir)
	entries, _ := os.ReadDir(f.cacheDir)
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || !e.IsDir() || strings.HasPrefix(e.Name(), tmpPrefix) {
			continue
		}
		sweep(filepath.Join(f.cacheDir, e.Name()))
		sizes[e.Name()] = dirSize(filepath.Join(f.cacheDir, e.Name()))
		used[e.Name()] = info.ModTime()
	}
	q := &f.quota
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.scanned {
		q.sizes, q.used, q.scanned = sizes, used, true
	}
}

func (f *Fetcher) total() int64 {
	q := &f.quota
	q.mu.Lock()
	defer q.mu.Unlock()
	var n int64
	for _, s := range q.sizes {
		n += s
	}
	for _, c := range q.claimed {
		n += c
	}
	return n
}

// orphaned returns the entries other than keep whose last owner was forgotten.
func (f *Fetcher) orphaned(keep string) []string {
	q := &f.quota
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []string
	for k := range q.orphans {
		if k != keep {
			out = append(out, k)
		}
	}
	return out
}

// victims returns the entries other than keep in the order they are evicted: orphans
// first, then least recently used first.
func (f *Fetcher) victims(keep string) []string {
	q := &f.quota
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []string
	for k := range q.sizes {
		if k != keep {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, func(a, b string) int {
		if q.orphans[a] != q.orphans[b] {
			if q.orphans[a] {
				return -1
			}
			return 1
		}
		return q.used[a].Compare(q.used[b])
	})
	return out
}

// evict removes entry key when no fetch holds it and, unless force (and the entry is still
// an orphan once held), no reader has reserved a checkout of it; it reports whether it did.
func (f *Fetcher) evict(key string, force bool) bool {
	unlock, ok := f.tryLock(key)
	if !ok {
		return false
	}
	defer unlock()
	if force { // Forget's, unless a fetch took the entry up again before this lock
		f.quota.mu.Lock()
		force = f.quota.orphans[key]
		f.quota.mu.Unlock()
	}
	dir := filepath.Join(f.cacheDir, key)
	if !force && reserved(filepath.Join(dir, "checkouts")) {
		return false
	}
	if removeDir(dir) != nil { // a missing entry is no error
		return false
	}
	q := &f.quota
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.sizes, key)
	delete(q.used, key)
	delete(q.orphans, key)
	return true
}

// tryLock takes the lock of one cache entry if no fetch holds it.
func (f *Fetcher) tryLock(key string) (func(), bool) {
	ch := f.entryLock(key)
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, true
	default:
		return nil, false
	}
}

// reserved reports whether a checkout under root is reserved for a reader (see reserve).
func reserved(root string) bool {
	entries, _ := os.ReadDir(root)
	now := time.Now()
	for _, e := range entries {
		if info, err := e.Info(); err == nil && info.ModTime().After(now) {
			return true
		}
	}
	return false
}

// removeUnreserved removes an entry's repositories and the checkouts no reader reserved.
func removeUnreserved(dir string) {
	sweep(dir) // repositories whose removal failed after their rename: tried again
	_ = removeDir(filepath.Join(dir, "shallow.git"))
	_ = removeDir(filepath.Join(dir, "full.git"))
	_, _ = prune(filepath.Join(dir, "checkouts"), 0)
}

// dirSize returns the disk a folder takes (disk blocks, see sources/diskuse).
func dirSize(dir string) int64 { return diskuse.Of(dir) }

// blockSize is what a claim rounds a file up to, and claims per folder it creates.
const blockSize = diskuse.BlockSize

// onDisk rounds n bytes up to whole blocks.
func onDisk(n int64) int64 { return diskuse.Round(n) }
