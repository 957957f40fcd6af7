package status

import (
	"context"
	"errors"
	"fmt"
	"github.com/converge-dev/converge/status/v1alpha1"
	"sync"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Outcome is what one reconcile of one generation found. It holds plain values only.
type Outcome struct {
	// UID is the metadata.uid of the Sync the reconcile read. A Sync is its UID, not its
	// name (I14): when the Sync under the key has another UID (deleted and re-created while
	// the reconcile ran), Write drops the outcome and returns ErrReplaced. Empty skips the
	// check.
	UID types.UID
	// Generation is the metadata.generation the reconcile read. It becomes
	// status.observedGeneration; a Sync whose status already describes a newer generation
	// is left alone.
	Generation int64
	// Ready is True, False or Unknown (in progress), with Reason and Message. Unknown sets
	// Reconciling=True, whose lastTransitionTime is when the reconcile of this Generation
	// and AttemptedRevision first wrote Unknown: a later Unknown outcome of the same
	// generation and revision keeps it, another one starts it anew.
	Ready   metav1.ConditionStatus
	Reason  string
	Message string
	// Stalled marks a terminal failure (bad input: wait for a new revision).
	Stalled bool
	// WaitOver marks a Ready=False outcome that ends the readiness wait of its generation
	// and revision (its deadline passed): Reconciling goes. Any other non-terminal failure
	// of the same generation and revision keeps Reconciling and its transition time, so a
	// failed poll does not restart the wait's deadline.
	WaitOver bool
	// AttemptedRevision is the revision the reconcile worked on ("" when the fetch failed).
	AttemptedRevision string
	// AppliedRevision is set only when that revision was applied successfully.
	AppliedRevision string
	// HandledRequest is the converge.dev/requestedAt value this reconcile handled.
	HandledRequest string
	Inventory      *v1alpha1.InventoryStatus
	// Summary counts the actions of this reconcile's apply. Write records it only when it
	// says something new (see SyncStatus.Summary): a no-op keeps the recorded one.
	Summary *v1alpha1.Summary
	// Duration is how long the reconcile took, recorded on the history entry this outcome
	// starts (zero: not known).
	Duration time.Duration
	// DriftKnown says the reconcile judged drift (its apply ran): then Drift is what
	// status.drift becomes (nil: none) and the Drifted condition follows it. A reconcile that
	// stopped before its apply leaves both as they are.
	DriftKnown bool
	Drift      *v1alpha1.DriftStatus
	// RollbackKnown says the reconcile learned whether the Sync is rolled back (it read its
	// source's head); then RolledBack is what status.rolledBack becomes, nil clearing it.
	RollbackKnown bool
	RolledBack    *v1alpha1.RolledBack
}

// ErrReplaced is returned (wrapped) by Write when it dropped an outcome because the Sync it
// was computed for is gone and another Sync (another UID) now has its name: the outcome says
// nothing about that one, which gets its own reconcile. Nothing was written.
var ErrReplaced = errors.New("the Sync was deleted and re-created under the same name: outcome dropped")

// Writer writes Sync status in its own optimistic-lock step: one write per outcome, with the
// resourceVersion of the object it was computed from; on a conflict it re-reads from the API
// server (Live), never from a cache, and writes the same outcome again, a bounded number of times.
type Writer struct {
	// Cached serves the first read (an informer cache is fine: a stale base costs one 409).
	Cached client.Reader
	// Live is an uncached reader used after every conflict.
	Live client.Reader
	// Client writes the status subresource.
	Client client.Client
	// Backoff bounds the retries on conflict.
	Backoff wait.Backoff
	// Now is the clock for condition transition times; nil means time.Now.
	Now func() time.Time
	// Owner is the name of the replica writing (the daemon's --replica-name). Write records
	// it as status.owner in the same patch as the outcome, never in a write of its own, so
	// `converge status` can say which replica reconciles a Sync. An outcome that changes
	// nothing but the owner (the first reconcile after a handover) is one write; an
	// unchanged owner keeps a no-op reconcile write-free (I7). Empty leaves status.owner
	// as it is.
	Owner string

	mu      sync.Mutex
	written map[types.NamespacedName]string // resourceVersion after our last write, per Sync
}

// errStaleBase sends Write's retry loop to the API server without a request: the cached
// base is older than our own last write.
var errStaleBase = apierrors.NewConflict(v1alpha1.GroupVersion.WithResource("syncs").GroupResource(), "", errors.New("cached base older than our last write"))

// Behind reports whether cached, the Sync key read from a cache, may predate the writer's
// last status write of it: we wrote it, and cached is not at the resourceVersion that write
// produced (or, since, read from the API server: caughtUp).
func (w *Writer) Behind(key types.NamespacedName, cached *v1alpha1.Sync) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	rv, ok := w.written[key]
	return ok && rv != cached.ResourceVersion
}

// Latest returns the Sync key to decide a reconcile on: cached, unless the cache may predate
// the writer's last status write of it (Behind); then the Sync as the API server has it,
// after which the writer waits for the cache to show that read. A decision taken on a
// status older than the last outcome goes wrong: the generation last applied looks not
// applied, and a reconcile meant to detect drift applies everything instead, correcting what
// the drift policy says to report only.
func (w *Writer) Latest(ctx context.Context, key types.NamespacedName, cached *v1alpha1.Sync) (*v1alpha1.Sync, error) {
	if w.Live == nil || !w.Behind(key, cached) {
		return cached, nil
	}
	live := &v1alpha1.Sync{}
	if err := w.Live.Get(ctx, key, live); err != nil {
		return nil, err
	}
	if live.UID == cached.UID {
		w.caughtUp(key, live.ResourceVersion)
	}
	return live, nil
}

// Forget drops what the writer remembers of its last write of the Sync key. The daemon calls
// it once a Sync is deleted: a Write finds no deleted Sync to forget it by, so without it a
// daemon that sees Syncs come and go keeps an entry for each.
func (w *Writer) Forget(key types.NamespacedName) { w.forgetWrite(key) }

// forgetWrite drops what recordWrite remembered for key.
func (w *Writer) forgetWrite(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.written, key)
}

// caughtUp moves what Behind waits for to rv, the resourceVersion of key read from
// the API server after our last write: once the cache shows it, the cache is past our write.
// Without it, a change by another writer (a label, an annotation) left the cache at a
// resourceVersion that was never ours, and every later Write read the API server.
func (w *Writer) caughtUp(key types.NamespacedName, rv string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.written[key]; ok {
		w.written[key] = rv
	}
}

// recordWrite remembers the resourceVersion our write of key produced.
func (w *Writer) recordWrite(key types.NamespacedName, rv string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.written == nil {
		w.written = map[types.NamespacedName]string{}
	}
	w.written[key] = rv
}

// DefaultBackoff is the conflict back-off of a Writer: 6 attempts within about a second.
var DefaultBackoff = wait.Backoff{Steps: 6, Duration: 20 * time.Millisecond, Factor: 2, Jitter: 0.2}

// Write records o on the Sync key. It writes nothing when the status already says the same,
// and it does not overwrite a status that describes a newer generation (I5); an
// observedGeneration above metadata.generation is impossible and is overwritten, never taken
// for newer (I14). It writes only onto the Sync whose UID is o.UID: another Sync of the same
// name gets nothing and Write returns ErrReplaced; the resourceVersion precondition of the
// patch covers a re-create between the read and the write. It returns the last conflict or
// API error when the bounded retries run out; a missing Sync is not an error.
func (w *Writer) Write(ctx context.Context, key types.NamespacedName, o Outcome) error {
	reader := w.Cached
	if reader == nil {
		reader = w.Live
	}
	backoff := w.Backoff
	if backoff.Steps == 0 {
		backoff = DefaultBackoff
	}
	replaced := false
	err := retry.RetryOnConflict(backoff, func() error {
		base := &v1alpha1.Sync{}
		err := reader.Get(ctx, key, base)
		cached := reader != w.Live
		reader = w.Live // every retry reads from the API server
		if err != nil {
			return err
		}
		if cached && w.Behind(key, base) {
			// The cache has not caught up with our last write (after a watch outage it
			// lags for seconds): what it shows is no base to decide on, neither for a write
			// (a PATCH bound to fail with 409, I7) nor for "nothing to write" (the outcome
			// may equal the stale status but not ours, I4). Read the API server instead.
			return errStaleBase
		}
		if o.UID != "" && base.UID != o.UID {
			if cached {
				return errStaleBase // the cache may show another incarnation than the server
			}
			replaced = true
			return nil
		}
		next := base.DeepCopy()
		if !w.apply(next, o) {
			if !cached {
				w.caughtUp(key, base.ResourceVersion)
			}
			return nil
		}
		patch := client.MergeFromWithOptions(patchBase(base, next), client.MergeFromWithOptimisticLock{})
		if err := w.Client.Status().Patch(ctx, next, patch); err != nil {
			return err
		}
		w.recordWrite(key, next.ResourceVersion)
		return nil
	})
	if apierrors.IsNotFound(err) {
		w.forgetWrite(key) // the Sync is gone: nothing to remember for it
		return nil
	}
	if err == nil && replaced {
		w.forgetWrite(key) // what we remembered was about the Sync that is gone
		err = ErrReplaced
	}
	if err != nil {
		return fmt.Errorf("%s: write status: %w", key, err)
	}
	return nil
}

// patchBase is what the merge patch that makes base next is computed from. A compacted base
// (read from the cache) has no recovery copy to diff against: when next replaces it, the
// base gets one stand-in entry, so the patch always sends the new copy, or its removal,
// and never leaves the old one on the server.
func patchBase(base, next *v1alpha1.Sync) *v1alpha1.Sync {
	if !Compacted(base) || Compacted(next) {
		return base
	}
	b := base.DeepCopy()
	b.Status.Inventory.Objects = []v1alpha1.InventoryObject{{}}
	return b
}

// apply merges o into the status of sync and reports whether it changed. Conditions other
// than Ready, Reconciling and Stalled (another writer's) are kept.
func (w *Writer) apply(sync *v1alpha1.Sync, o Outcome) bool {
	s := &sync.Status
	if s.ObservedGeneration > o.Generation && s.ObservedGeneration <= sync.Generation {
		return false // a newer reconcile already wrote: never regress (I5)
	}
	// An observedGeneration above metadata.generation describes no generation that ever
	// existed (a hand-written or buggy status write): trusting it as "newer" would freeze the
	// Sync for good, so it is overwritten (I14).
	var before v1alpha1.SyncStatus
	s.DeepCopyInto(&before)
	now := metav1.NewTime(w.now())
	s.ObservedGeneration = o.Generation
	setCondition(s, v1alpha1.ConditionReady, o.Ready, o.Reason, o.Message, o.Generation, now)
	reconciling := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionReconciling)
	sameAttempt := reconciling != nil && reconciling.ObservedGeneration == o.Generation &&
		(o.AttemptedRevision == "" || o.AttemptedRevision == before.LastAttemptedRevision)
	switch {
	case o.Ready == metav1.ConditionUnknown:
		if reconciling != nil && !sameAttempt {
			// Another generation or revision: its reconcile starts now. The transition time
			// is when this one began, which the daemon's readiness deadline is measured from.
			meta.RemoveStatusCondition(&s.Conditions, v1alpha1.ConditionReconciling)
		}
		setCondition(s, v1alpha1.ConditionReconciling, metav1.ConditionTrue, o.Reason, o.Message, o.Generation, now)
	case o.Ready == metav1.ConditionFalse && !o.Stalled && !o.WaitOver && sameAttempt:
		// A failure while the same generation and revision wait (a fetch error, a conflict)
		// keeps Reconciling as it is: its transition time still says when the wait began,
		// so a failed poll does not restart spec.timeout.
	default:
		meta.RemoveStatusCondition(&s.Conditions, v1alpha1.ConditionReconciling)
	}
	if o.Stalled {
		setCondition(s, v1alpha1.ConditionStalled, metav1.ConditionTrue, o.Reason, o.Message, o.Generation, now)
	} else {
		meta.RemoveStatusCondition(&s.Conditions, v1alpha1.ConditionStalled)
	}
	if o.AttemptedRevision != "" {
		s.LastAttemptedRevision = o.AttemptedRevision
	}
	if o.AppliedRevision != "" {
		s.LastAppliedRevision, s.LastAppliedGeneration = o.AppliedRevision, o.Generation
	}
	if o.DriftKnown {
		setDrift(s, o, now)
	}
	if o.HandledRequest != "" {
		s.LastHandledRequest = o.HandledRequest
	}
	if o.Inventory != nil && !sameInventory(s.Inventory, o.Inventory) {
		s.Inventory = o.Inventory
	}
	if o.RollbackKnown {
		s.RolledBack = o.RolledBack
	}
	s.Summary = summaryOf(before, o)
	if w.Owner != "" {
		s.Owner = w.Owner
	}
	if equality.Semantic.DeepEqual(before, *s) {
		return false // history alone never makes a write (I7)
	}
	recordHistory(s, o, now)
	return true
}

// driftNamed is how many drifted objects the Drifted condition's message names.
const driftNamed = 3

// setDrift records o's drift: status.drift, and the Drifted condition True while there is
// some (absent otherwise). The message names the first objects, so the same drift found
// again compares equal and writes nothing (I7).
func setDrift(s *v1alpha1.SyncStatus, o Outcome, now metav1.Time) {
	if o.Drift == nil || len(o.Drift.Objects) == 0 {
		s.Drift = nil
		meta.RemoveStatusCondition(&s.Conditions, v1alpha1.ConditionDrifted)
		return
	}
	s.Drift = o.Drift
	what := "1 object drifted from revision %s and is left so"
	if n := o.Drift.Count(); n > 1 {
		what = fmt.Sprint(n) + " objects drifted from revision %s and are left so"
	}
	msg := fmt.Sprintf(what+" (driftPolicy Report): %s",
		s.LastAppliedRevision, v1alpha1.DescribeDrift(o.Drift.Objects, o.Drift.MoreObjects, driftNamed))
	setCondition(s, v1alpha1.ConditionDrifted, metav1.ConditionTrue, v1alpha1.ReasonDriftDetected, msg, o.Generation, now)
}

// summaryOf is the summary to record after o, given the status before it: o's summary when
// its apply changed something (created, configured, pruned or failed an object), when it is
// the first apply of its revision (o.AttemptedRevision differs from the last attempted one),
// or when the recorded summary is missing or reports failures. Otherwise o was a no-op and
// the recorded summary, which describes the last apply that changed something, stays; only
// its NotReady count, a state rather than an action, follows o. So a no-op reconcile, a
// daemon restart under the same replica name included, writes nothing (I7); a new owner
// (Writer.Owner) costs one write.
func summaryOf(before v1alpha1.SyncStatus, o Outcome) *v1alpha1.Summary {
	prev := before.Summary
	switch {
	case o.Summary == nil:
		return prev
	case prev == nil, changed(o.Summary), prev.Failed > 0, o.AttemptedRevision != before.LastAttemptedRevision:
		return o.Summary
	}
	keep := *prev
	keep.NotReady = o.Summary.NotReady
	return &keep
}

// changed reports whether the apply s counts changed an object or failed to.
func changed(s *v1alpha1.Summary) bool {
	return s.Created+s.Configured+s.Pruned+s.Failed > 0
}

func (w *Writer) now() time.Time {
	if w.Now != nil {
		return w.Now()
	}
	return time.Now()
}

// maxMessage keeps condition messages well below the API's 32768-byte limit.
const maxMessage = 8192

// truncateMessage cuts msg to maxMessage bytes, on a character boundary, saying it did.
func truncateMessage(msg string) string {
	const mark = " …(truncated)"
	if len(msg) <= maxMessage {
		return msg
	}
	cut := maxMessage - len(mark)
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + mark
}

// setCondition sets one condition; meta.SetStatusCondition keeps lastTransitionTime when the
// status did not change, so an unchanged outcome compares equal and writes nothing.
func setCondition(s *v1alpha1.SyncStatus, typ string, st metav1.ConditionStatus, reason, msg string, gen int64, now metav1.Time) {
	if reason == "" {
		reason = "Unknown"
	}
	msg = truncateMessage(msg)
	meta.SetStatusCondition(&s.Conditions, metav1.Condition{
		Type: typ, Status: st, Reason: reason, Message: msg, ObservedGeneration: gen, LastTransitionTime: now,
	})
}
