package engine

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/object"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// liveView is how a run knows the live object of an item before judging it. A run chooses
// one (Engine.newLiveView): listed, or watched in watch mode. Each falls back on the one
// below it when it cannot answer: watched on listed, listed on direct.
type liveView interface {
	// get returns what the view knows of it's live object. prev is the view's last answer
	// for it in this run (the zero sight at first): judging or applying found that answer
	// undecided or stale, so the view reads the object anew.
	get(ctx context.Context, it *item, prev sight) (sight, error)
	// record keeps what the run established of it (out) for the next runs' reads.
	record(it *item, out outcome)
}

// sight is what a live view knows of an item's live object, and where it knows it from.
type sight struct {
	from sightSource
	// live is the object the API server answered (fromList, fromGet); nil: it does not exist.
	live *unstructured.Unstructured
	// cached is what the watch cache shows of the object (metadata only, shared with the
	// cache: read, never modified); nil when it does not show it.
	cached *metav1.PartialObjectMetadata
	// action is what the memo decided (fromMemo): created (listed missing), unchanged, or
	// configured (a new desired object over our own).
	action Action
}

// sightSource is where a sight comes from.
type sightSource int

const (
	unseen sightSource = iota // nothing read yet
	// fromMemo: the watch cache and the memo decided without reading the object. The
	// decision is acted on once, without a dry-run and under a precondition on what the cache
	// showed; when that fails the object is read from the API server.
	fromMemo
	// fromList: the survey's LIST of the current chunk. Judged as of the LIST; a dry-run's
	// answer is trusted only at the very resourceVersion listed.
	fromList
	fromGet // a GET just now
)

// newLiveView chooses the live view of a run of owner's inventory: watched in watch mode
// when the run really applies (a DryRun or a Diff shows the server's exact answer), listed
// otherwise. listed is the view whose survey the run fills chunk by chunk (survey.go).
func (e *Engine) newLiveView(owner string, opts ApplyOptions) (view liveView, listed *listedView) {
	listed = &listedView{direct: directView{e: e}}
	if e.memo == nil || e.cache == nil || opts.DryRun || opts.Diff {
		return listed, listed
	}
	w := &watchedView{listed: listed, cache: e.cache, memo: e.memo, owner: owner, manager: memoKey(opts)}
	listed.known = w.knows
	return w, listed
}

// directView reads every live object with a GET.
type directView struct{ e *Engine }

func (v directView) get(ctx context.Context, it *item, _ sight) (sight, error) {
	live, err := v.e.get(ctx, it.obj)
	return sight{from: fromGet, live: live}, err
}

func (directView) record(*item, outcome) {}

// listedView answers a first read from the survey of the current chunk (survey.go), every
// other read as direct.
type listedView struct {
	direct directView
	// surveyed is what the API server just listed about the items of the current chunk: their
	// live objects, or nil for those that do not exist. applyStages sets it before the
	// chunk's workers start.
	surveyed map[object.ObjMetadata]*unstructured.Unstructured
	// known, when set, tells the items that the view above decides without the survey (the
	// memo knows them): the survey does not read them.
	known func(*item) bool
}

func (v *listedView) get(ctx context.Context, it *item, prev sight) (sight, error) {
	if prev.from == unseen {
		if live, ok := v.surveyed[it.id]; ok {
			return sight{from: fromList, live: live}, nil
		}
	}
	return v.direct.get(ctx, it, prev)
}

func (*listedView) record(*item, outcome) {}

// missing reports whether the survey listed id as not existing.
func (v *listedView) missing(id object.ObjMetadata) bool {
	live, ok := v.surveyed[id]
	return ok && live == nil
}

// watchedView decides first from the watch cache (metadata only) and the memo (memo.go);
// what they cannot decide is read from the API server, as listed. It records in the memo
// what each run established.
type watchedView struct {
	listed  *listedView
	cache   *watchCache
	memo    *memo
	owner   string // the run's inventory ID
	manager string // the run's field manager and take-over list (memoKey), hashed with each object
}

func (v *watchedView) get(ctx context.Context, it *item, prev sight) (sight, error) {
	switch prev.from {
	case unseen:
		it.hash = hashObject(v.manager, it.obj)
		s, decided := v.recall(ctx, it)
		if decided {
			return s, nil
		}
		return v.read(ctx, it, s.cached)
	case fromMemo:
		return v.read(ctx, it, prev.cached)
	}
	return v.listed.direct.get(ctx, it, prev)
}

// recall decides it from the watch cache and the memo (decided), or returns what the cache
// shows of it for the read that must decide instead:
//
//   - listed as missing by the API server (survey): a new object, created at once without
//     reading the cache (its informer is started after the run, so a cold apply does not
//     stream back a watch event for every object it creates);
//   - ours, at the resourceVersion and desired hash the memo recorded: unchanged;
//   - ours, and the memo recorded another desired hash (a new commit): configured at once;
//   - ours otherwise (a restart, a status update, an out-of-band edit): undecided, since only
//     the full live object can show whether an apply would change anything (after a restart
//     the survey has listed it; its managedFields usually spare the dry-run, see
//     appliedAsDesired).
//
// An object the cache shows as someone else's or unowned, or does not show while
// inventoried, is undecided too, so ownership is always decided on the API server's word.
// A new object the memo does not know (alone of its kind in its namespace, so not listed) is
// undecided without reading the cache: the GET that follows could not be spared, and reading
// the cache would start (and wait for) its kind's informer in the middle of the run.
func (v *watchedView) recall(ctx context.Context, it *item) (sight, bool) {
	if v.listed.missing(it.id) {
		return sight{from: fromMemo, action: ActionCreated}, true
	}
	m, known := v.memoOf(it)
	if !it.stored && !known {
		return sight{}, false
	}
	cached, err := v.cache.cachedLive(ctx, it.gvk, client.ObjectKey{Namespace: it.id.Namespace, Name: it.id.Name})
	switch {
	case err != nil, cached == nil: // the API server has not confirmed it (I11: no adoption on a stale cache)
		return sight{}, false
	case cached.GetAnnotations()[OwnerAnnotation] != v.owner:
		return sight{cached: cached}, false
	case known && m.hit(it.hash, cached.GetResourceVersion()):
		return sight{from: fromMemo, cached: cached, action: ActionUnchanged}, true
	case known && m.hash != it.hash && !it.ignored: // ignored fields are sent as live has them
		return sight{from: fromMemo, cached: cached, action: ActionConfigured}, true
	}
	return sight{cached: cached}, false
}

// read is the API server's answer for it once the memo did not decide: the survey's when it
// listed the object at the very resourceVersion the cache shows (cached), else a GET. A
// "missing" answer, or one at another version, may be older than what made the memo step
// aside (the cache has seen the object since, or the memo's apply failed), and acting on it
// could adopt another set's object (I11).
func (v *watchedView) read(ctx context.Context, it *item, cached *metav1.PartialObjectMetadata) (sight, error) {
	if live := v.listed.surveyed[it.id]; live != nil && cached != nil && cached.GetResourceVersion() == live.GetResourceVersion() {
		return sight{from: fromList, live: live}, nil
	}
	return v.listed.direct.get(ctx, it, sight{})
}

// record remembers the live object an apply or a verification produced, or forgets the
// object when the run did not establish it. What the memo already holds (a no-op) is not
// written again.
func (v *watchedView) record(it *item, out outcome) {
	if out.rv == "" || out.change.Action == ActionFailed {
		v.memo.forget(it.id)
		return
	}
	if m, known := v.memoOf(it); known && m == (memoEntry{hash: it.hash, resourceVersion: out.rv}) {
		return
	}
	v.memo.remember(it.id, it.hash, out.rv)
}

// memoOf returns what the memo recorded of it when the run first asked: once per item,
// since the survey and the watch path both ask, and each lookup in a map of 50,000 objects
// costs a few cache misses. An entry read early is as safe to decide on as one read later:
// it is only ever a true record (this desired object left the live object at that
// resourceVersion), and a hit also needs the watch cache to show that very resourceVersion
// now. Each item is handled by one goroutine at a time (the stage's survey, then its apply).
func (v *watchedView) memoOf(it *item) (memoEntry, bool) {
	if !it.memoRead {
		it.memo, it.memoKnown = v.memo.get(it.id)
		it.memoRead = true
	}
	return it.memo, it.memoKnown
}

// knows reports whether the memo has an entry for it (memoOf).
func (v *watchedView) knows(it *item) bool {
	_, known := v.memoOf(it)
	return known
}
