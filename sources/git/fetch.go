package git

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	gogit "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/transport"

	"github.com/converge-dev/converge/sources/cachekey"
)

// Fetcher fetches repositories into a cache directory, one cache per URL and credentials
// (see cacheKey). It is safe for concurrent use; fetches into the same cache are
// serialized, others run in parallel.
type Fetcher struct {
	cacheDir string

	mu    sync.Mutex
	locks map[string]chan struct{}
	stats Stats

	keyer *cachekey.Keyer // names cache directories

	quota   quota   // the entries' sizes, uses and owners (see CacheQuota)
	readers readers // the checkouts' readers (see Checkout.Release)
	commits commits // the commit times of checkouts written (see checkout)
}

// NewFetcher returns a Fetcher that keeps its repositories and checkouts under cacheDir.
func NewFetcher(cacheDir string) *Fetcher {
	installTransports()
	return &Fetcher{cacheDir: cacheDir, locks: map[string]chan struct{}{}, keyer: cachekey.New(cacheDir)}
}

// Stats returns how many ref lookups and pack transfers the Fetcher performed.
func (f *Fetcher) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}

var commitPattern = regexp.MustCompile(`^[0-9a-f]{40}$`)

// Fetch resolves repo.Ref on the remote and returns a checkout of that commit. When the
// commit was fetched before with the same credentials, only the ref advertisement is read:
// for an exact commit too, so that credentials that can no longer read the remote are
// refused even when the commit is cached.
//
// The checkout stays on disk until the caller releases it (Checkout.Release), or at the
// latest until ctx's deadline, whatever other fetches of the same URL and credentials do
// meanwhile: a caller that reads it under the same ctx never sees it removed half-way (a
// truncated render). Without a deadline or a Release, only KeepCheckouts protects it.
func (f *Fetcher) Fetch(ctx context.Context, repo Repository, opts FetchOptions) (*Checkout, error) {
	// The caller reads the checkout under ctx (a render), after the lock is released: it is
	// kept until ctx's deadline, not only the fetch's.
	readUntil, _ := ctx.Deadline()
	clock := &fetchClock{start: time.Now()}
	if opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.Timeout)
		defer cancel()
	}
	clock.ctx = ctx
	if err := f.checkRepository(repo, opts); err != nil {
		return nil, err
	}
	key, err := f.cacheKey(repo)
	if err != nil {
		return nil, err
	}
	unlock, err := f.lock(ctx, key, clock)
	if err != nil {
		return nil, fmt.Errorf("fetch %s %s: %w", redact(repo.URL), repo.Ref, err)
	}
	defer unlock()

	auth, err := authMethod(repo.URL, repo.Auth, opts.Timeout)
	if err != nil {
		return nil, err
	}
	ep, err := transport.NewEndpoint(repo.URL) // checkURL parsed it already
	if err != nil {
		return nil, err
	}
	if ep.Protocol == "file" {
		clock.answered.Store(true) // no connection to watch: say "not finished", not "no answer"
	}
	policy := dialPolicy{allowLocal: opts.AllowLocal,
		budget:        downloadBudget(opts),
		advertisement: newFetchBudget(maxAdvertisement, "ref advertisement (refs listed by the remote)"),
		clock:         clock}
	ctx = withDialPolicy(ctx, policy)
	proxyOpts, release := policy.proxyOptions(ep.Protocol)
	defer release()
	claim := func(n int64) error { return f.claim(key, opts.Tenant, n, opts.CacheQuota) }
	defer f.settle(key) // before unlock: what the fetch wrote is measured while it holds the entry
	c := &cache{dir: filepath.Join(f.cacheDir, key), url: repo.URL, auth: auth, proxy: proxyOpts, fetcher: f,
		claim: claim, guard: &packGuard{maxObject: opts.MaxFileSize, claim: claim, slot: indexSlot(ctx, opts)}}
	accounted := false
	defer func() {
		// A failed fetch may have written too (a pack, then a refused export): counted.
		if !accounted && c.wrote {
			_ = f.account(key, true, opts.CacheQuota)
		}
	}()
	t, err := c.transfer(ctx, repo.Ref, policy)
	if err != nil {
		return nil, fmt.Errorf("fetch %s %s: %w", redact(repo.URL), repo.Ref, err)
	}
	// Before the export: a commit that fails verification is never written out.
	sigs, err := c.verify(t, repo.Ref, repo.Verify)
	if err != nil {
		return nil, fmt.Errorf("verify %s %s: %w", redact(repo.URL), repo.Ref, err)
	}
	co, err := c.checkout(ctx, t, readUntil, opts)
	if err == nil {
		co.Signatures = sigs
		f.own(opts.Owner, key)
		accounted = true
		if err = f.account(key, c.wrote, opts.CacheQuota); err != nil {
			co.Release()
		}
	}
	if err != nil {
		if ended := clock.ended(); ended != nil {
			err = ended
		}
		return nil, fmt.Errorf("fetch %s %s: %w", redact(repo.URL), repo.Ref, err)
	}
	return co, nil
}

// checkRepository refuses, before anything is fetched, a commit that is not 40 lowercase hex
// characters and a URL checkURL refuses.
func (f *Fetcher) checkRepository(repo Repository, opts FetchOptions) error {
	if repo.Ref.Commit != "" && !commitPattern.MatchString(repo.Ref.Commit) {
		return fmt.Errorf("commit %q: want 40 lowercase hex characters", repo.Ref.Commit)
	}
	return checkURL(repo.URL, f.cacheDir, opts.AllowLocal)
}

// indexSlot returns opts.IndexSlot bound to ctx, or nil.
func indexSlot(ctx context.Context, opts FetchOptions) func() (func(), error) {
	if opts.IndexSlot == nil {
		return nil
	}
	return func() (func(), error) { return opts.IndexSlot(ctx) }
}

// transfer resolves ref and fetches its commit into the cache when it is not there yet. Its
// error names what stopped it: a refused pack, a budget, the deadline or a refused address
// before go-git's own account (whatever the closed connection made of it, or the request
// URL with its credentials).
func (c *cache) transfer(ctx context.Context, ref Ref, policy dialPolicy) (target, error) {
	var t target
	var err error
	if ref.Commit != "" {
		t, err = c.commit(ctx, ref)
	} else {
		t, err = c.ref(ctx, ref)
	}
	if err != nil {
		removePartialPacks(filepath.Join(c.dir, "shallow.git"))
		removePartialPacks(filepath.Join(c.dir, "full.git"))
	}
	if refused := c.guard.refused(); refused != nil {
		return t, refused
	}
	for _, b := range []*fetchBudget{policy.budget, policy.advertisement} {
		if b.exceeded() {
			return t, b.err()
		}
	}
	if err == nil {
		return t, nil
	}
	if ended := policy.clock.ended(); ended != nil {
		return t, ended
	}
	if ae, ok := refusedAddress(err); ok {
		return t, ae
	}
	return t, err
}

// downloadBudget is what one fetch may read from the remote: MaxFetchSize, or a quarter of
// the cache quota when that is smaller (a received pack is on disk twice while it is
// checked, see packGuard: one fetch's pack takes at most half the quota).
func downloadBudget(opts FetchOptions) *fetchBudget {
	if q := opts.CacheQuota / 4; q > 0 && (opts.MaxFetchSize <= 0 || q < opts.MaxFetchSize) {
		return newFetchBudget(q, "received from the remote, over a quarter of the git cache quota (--git-cache-quota)")
	}
	return newFetchBudget(opts.MaxFetchSize, "received from the remote (--max-fetch-size)")
}

// entryLock returns the lock of cache entry key (a channel of one), made on first use.
func (f *Fetcher) entryLock(key string) chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch, ok := f.locks[key]
	if !ok {
		ch = make(chan struct{}, 1)
		f.locks[key] = ch
	}
	return ch
}

// lock takes the lock of one cache, giving up when ctx ends (clock: the fetch's, to name
// its deadline; may be nil).
func (f *Fetcher) lock(ctx context.Context, key string, clock *fetchClock) (func(), error) {
	ch := f.entryLock(key)
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, nil
	case <-ctx.Done():
		var de *DeadlineError
		if errors.As(clock.ended(), &de) {
			return nil, fmt.Errorf("another fetch of the same url and credentials still running after %s: %w", de.After, context.DeadlineExceeded)
		}
		return nil, fmt.Errorf("wait for another fetch of the same url and credentials: %w", context.Cause(ctx))
	}
}

func (f *Fetcher) count(lookup, transfer int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stats.Lookups += lookup
	f.stats.Transfers += transfer
}

// cache is the on-disk state of one URL and credentials: a shallow bare repository for
// branches and tags, a full one for commits the server will not serve by SHA, and exported
// checkouts.
type cache struct {
	dir  string
	url  string
	auth transport.AuthMethod
	// proxy carries the fetch's dial policy to the SSH transport (see dialPolicy).
	proxy   transport.ProxyOptions
	fetcher *Fetcher
	// guard checks the packs the fetch receives (nil: none).
	guard *packGuard
	// claim counts bytes the fetch is about to write against the cache quota (see claim).
	claim func(n int64) error
	// wrote records that the fetch changed the cache on disk (a transfer or an export).
	wrote bool
}

// ref resolves a branch, tag or semver ref with one ref advertisement and fetches the
// commit only when it is not cached yet.
func (c *cache) ref(ctx context.Context, ref Ref) (target, error) {
	r, err := c.open("shallow.git")
	if err != nil {
		return target{}, err
	}
	remote, refs, err := c.list(ctx, r)
	if err != nil {
		return target{}, err
	}
	t, err := index(refs).pick(ref)
	if err != nil || (haveTarget(r, t) && haveTag(r, t)) {
		return t, err
	}
	// Force: a force-pushed branch replaces the old head. Depth 1: only the tip is needed.
	spec := config.RefSpec(fmt.Sprintf("+%s:%s", t.refName, t.refName))
	err = remote.FetchContext(ctx, &gogit.FetchOptions{
		RefSpecs: []config.RefSpec{spec}, Depth: 1, Auth: c.auth, Tags: gogit.NoTags, Force: true, ProxyOptions: c.proxy,
	})
	c.transferred()
	if err != nil && !errors.Is(err, gogit.NoErrAlreadyUpToDate) {
		return target{}, fmt.Errorf("fetch %s: %w", t.refName, classify(err))
	}
	// The ref may have moved between the advertisement and the fetch: use what was fetched.
	h, err := peel(r, t.refName)
	if err != nil {
		return target{}, fmt.Errorf("read fetched %s: %w", t.refName, err)
	}
	t.hash, t.tag = h, tagOf(r, t.refName)
	return t, nil
}

// commit fetches an exact commit: by SHA when the server allows it, else with a full fetch
// of all branches and tags into a separate, non-shallow repository.
func (c *cache) commit(ctx context.Context, ref Ref) (target, error) {
	t := target{name: ref.Branch, hash: plumbing.NewHash(ref.Commit)}
	r, err := c.open("shallow.git")
	if err != nil {
		return target{}, err
	}
	full, err := c.open("full.git")
	if err != nil {
		return target{}, err
	}
	if have(r, t.hash) || have(full, t.hash) {
		// These credentials fetched the commit once; they must still read the remote.
		_, _, err := c.list(ctx, r)
		return t, err
	}
	dst := plumbing.ReferenceName("refs/converge/commits/" + ref.Commit)
	err = r.FetchContext(ctx, &gogit.FetchOptions{
		RefSpecs: []config.RefSpec{config.RefSpec(fmt.Sprintf("+%s:%s", ref.Commit, dst))},
		Depth:    1, Auth: c.auth, Tags: gogit.NoTags, Force: true, ProxyOptions: c.proxy,
	})
	c.transferred()
	if err == nil || errors.Is(err, gogit.NoErrAlreadyUpToDate) {
		if have(r, t.hash) {
			return t, nil
		}
	} else if classified := classify(err); classified != err {
		return target{}, classified
	} else if _, refused := refusedAddress(err); refused {
		return target{}, err
	} else if c.guard.refused() != nil {
		return target{}, err // a refused pack or claim: a full fetch would be refused too
	}
	err = full.FetchContext(ctx, &gogit.FetchOptions{
		RefSpecs: []config.RefSpec{"+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"},
		Auth:     c.auth, Tags: gogit.NoTags, Force: true, ProxyOptions: c.proxy,
	})
	c.transferred()
	if err != nil && !errors.Is(err, gogit.NoErrAlreadyUpToDate) {
		return target{}, fmt.Errorf("fetch all branches and tags: %w", classify(err))
	}
	if !have(full, t.hash) {
		return target{}, fmt.Errorf("commit %s: %w", ref.Commit, ErrRefNotFound)
	}
	return t, nil
}

// transferred counts a pack fetch, which may have written to the cache.
func (c *cache) transferred() {
	c.wrote = true
	c.fetcher.count(0, 1)
}

// list reads the remote's ref advertisement with the cache's credentials (which also
// checks that they still read the repository) and returns r's remote and the refs.
func (c *cache) list(ctx context.Context, r *gogit.Repository) (*gogit.Remote, []*plumbing.Reference, error) {
	remote, err := r.Remote(gogit.DefaultRemoteName)
	if err != nil {
		return nil, nil, err
	}
	refs, err := remote.ListContext(ctx, &gogit.ListOptions{Auth: c.auth, PeelingOption: gogit.AppendPeeled, ProxyOptions: c.proxy})
	c.fetcher.count(1, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("list refs: %w", classify(err))
	}
	return remote, refs, nil
}

// open opens or creates one of the cache's bare repositories. A repository that cannot be
// opened is assumed corrupt (an interrupted first fetch) and is recreated.
func (c *cache) open(name string) (*gogit.Repository, error) {
	path := filepath.Join(c.dir, name)
	r, err := openRepository(path, c.guard)
	if err == nil {
		return r, nil
	}
	if err := removeDir(path); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(path, 0o755); err != nil {
		return nil, err
	}
	r, err = initRepository(path, c.guard)
	if err != nil {
		return nil, fmt.Errorf("init cache repository: %w", err)
	}
	_, err = r.CreateRemote(&config.RemoteConfig{Name: gogit.DefaultRemoteName, URLs: []string{c.url}})
	if err != nil {
		return nil, fmt.Errorf("init cache repository: %w", err)
	}
	return r, nil
}

// haveTarget reports whether the commit a ref resolved to is stored in r. A tag the remote
// did not peel names either a commit (a lightweight tag) or an annotated tag object, which
// only decoding tells apart: fetched and peeled (see ref), it becomes its commit.
func haveTarget(r *gogit.Repository, t target) bool {
	if t.refName.IsTag() && t.tag.IsZero() {
		_, err := r.CommitObject(t.hash)
		return err == nil
	}
	return have(r, t.hash)
}

// have reports whether an object with hash h (the commit a ref resolved to) is stored in
// r. It looks h up in the pack indexes and decodes nothing: reading the commit itself
// would build a map of every object's offset in the pack, about 1 MB for every fetch of a
// repository of 50,000 objects. An object that is not a commit fails at the checkout
// (commitObject).
func have(r *gogit.Repository, h plumbing.Hash) bool {
	return r.Storer.HasEncodedObject(h) == nil
}

// peel returns the commit a local branch or tag ref points to.
func peel(r *gogit.Repository, name plumbing.ReferenceName) (plumbing.Hash, error) {
	ref, err := r.Reference(name, true)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if tag, err := r.TagObject(ref.Hash()); err == nil {
		commit, err := tag.Commit()
		if err != nil {
			return plumbing.ZeroHash, err
		}
		return commit.Hash, nil
	}
	return ref.Hash(), nil
}

// CacheDir returns the directory the Fetcher keeps repositories and checkouts in.
func (f *Fetcher) CacheDir() string { return f.cacheDir }
