package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cli-utils/pkg/object"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/converge-dev/converge/cmd/converge/daemon/shard"
	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/inventory"
	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/sources/git"
	"github.com/converge-dev/converge/status"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// Condition reasons written by the daemon.
const (
	reasonSucceeded   = "ReconciliationSucceeded"
	reasonFetchFailed = "FetchFailed"
	reasonBuildFailed = "BuildFailed"
	reasonApplyFailed = "ApplyFailed"
	reasonHealthCheck = "HealthCheckFailed"
	reasonDeleteFail  = "DeleteFailed"
	// reasonInventoryPartMissing: the Sync's inventory lists a part ConfigMap that is gone
	// (inventory.MissingPartError); Stalled until a person restores it or accepts the loss.
	reasonInventoryPartMissing = "InventoryPartMissing"
	// reasonSourceVerificationFailed: spec.source.git.verify refused the fetched revision,
	// or its keys could not be read; nothing is rendered, applied or pruned (I8).
	reasonSourceVerificationFailed = "SourceVerificationFailed"
)

// reconciler runs fetch → render → apply → prune → readiness → status for one Sync.
type reconciler struct {
	client  client.Client // cached reads, metadata writes
	live    client.Reader // uncached reads: conflict re-reads (git Secrets go through engines)
	loader  *sources.Loader
	render  renderSettings
	engines *engineSet
	drift   *driftTrigger // nil: drift is corrected at the interval only
	deps    dependencies  // spec.dependsOn, read from the cache
	crash   crashPoints   // test-only
	writer  *status.Writer
	events  record.EventRecorder
	metrics *recorder
	// states is what the daemon remembers of each Sync between reconciles (sync_state.go),
	// forgotten in one place (forget).
	states *syncStates
	grace  time.Duration // deletion grace (finalize); zero means defaultDeletionGrace
	// concurrency is how many Syncs are reconciled in parallel (MaxConcurrentReconciles).
	concurrency int
	// namespaces holds each namespace to its share of those workers (fair.go).
	namespaces *namespaceGate

	// shards begins each reconcile under its Sync's shard: with sharding on, only those of
	// the shards this replica holds (shard.Gate); shard.Off otherwise. shardSource queues the
	// Syncs of an acquired shard (nil when off).
	shards      shardGate
	shardSource source.Source

	// kubeVersion is the API server's version for charts that set none (helm.go).
	kubeVersion *clusterVersion

	// notifier sends the Sync's transitions after its status write (notifications.go); nil:
	// none.
	notifier *notifier
}

// newReconciler wires the reconciler to the manager's clients: the cache for Syncs and
// metadata writes, the API server for re-reads, one engine and git Secret reader per identity, the
// drift trigger when the watch cache can report drift, and the status writer counting its
// conflicts.
func newReconciler(ctx context.Context, mgr ctrl.Manager, cfg *rest.Config, metrics *recorder, o Options) *reconciler {
	states := newSyncStates()
	drift := newDriftTrigger(states)
	engOpts := engine.Options{Hooks: o.test.crash.Engine}
	if o.WatchCache && o.DriftReconcile {
		engOpts.Changed = drift.changed
	} else {
		drift = nil
	}
	engines := newEngineSet(ctx, cfg, engOpts, o.WatchCache, o.DefaultServiceAccount, states)
	r := &reconciler{
		client:      mgr.GetClient(),
		live:        mgr.GetAPIReader(),
		loader:      sources.NewLoaderSized(o.CacheDir, o.RenderCacheSize),
		kubeVersion: &clusterVersion{cfg: cfg},
		render: renderSettings{timeout: o.BuildTimeout, limits: o.Limits, allowLocalGit: o.AllowLocalGit, maxFetchSize: o.MaxFetchSize, fetchTimeout: o.FetchTimeout,
			cacheQuota: o.GitCacheQuota, ociCacheQuota: o.OCICacheQuota,
			chartCacheQuota: o.ChartCacheQuota, maxIndexSize: o.MaxIndexSize},
		engines:     engines,
		drift:       drift,
		deps:        dependencies{cache: mgr.GetCache(), noCrossNamespace: o.crossNamespaceRefused(), sharded: o.WatchLabelSelector != ""},
		crash:       o.test.crash,
		writer:      &status.Writer{Cached: mgr.GetClient(), Live: mgr.GetAPIReader(), Client: conflictCounting{mgr.GetClient(), metrics}, Owner: o.Replica},
		events:      mgr.GetEventRecorderFor("converge"), //nolint:staticcheck // the events/v1 recorder needs a newer RBAC story
		states:      states,
		metrics:     metrics,
		grace:       o.DeletionGrace,
		concurrency: o.Concurrency,
		namespaces:  newNamespaceGate(o.Concurrency, o.MaxConcurrentPerNamespace),
		shards:      shard.Off{},
	}
	r.forgetOutside()
	return r
}

// SetupWithManager registers the reconciler as the manager's controller of Syncs, with the
// dependency watches (depends.go) and the drift trigger as more sources of requests.
func (r *reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	b, err := r.deps.watch(ctx, mgr, ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.Sync{}, builder.WithPredicates(syncChanged{})))
	if err != nil {
		return err
	}
	if r.namespaces != nil {
		// The gate keeps a worker for other namespaces only when there are some.
		informer, err := mgr.GetCache().GetInformer(ctx, &v1alpha1.Sync{})
		if err != nil {
			return err
		}
		r.namespaces.holders = &syncHolders{}
		if _, err := informer.AddEventHandler(r.namespaces.holders.handler()); err != nil {
			return err
		}
	}
	if r.drift != nil {
		b = b.WatchesRawSource(r.drift.source())
	}
	if r.shardSource != nil {
		b = b.WatchesRawSource(r.shardSource)
	}
	return b.
		// Names are validated per process; tests run several daemons in one process.
		WithOptions(controller.Options{MaxConcurrentReconciles: r.concurrency, SkipNameValidation: ptr.To(true)}).
		Complete(r)
}

// Reconcile implements reconcile.Reconciler: it reconciles the Sync within its namespace's
// share of the workers (fair.go).
func (r *reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	done, ok := r.namespaces.enter(req.Namespace)
	if !ok {
		// The namespace runs its share of the workers: try again shortly, having read and
		// written nothing (not a failure: no back-off, no log).
		r.metrics.deferred(req.Namespace)
		return ctrl.Result{RequeueAfter: deferDelay}, nil
	}
	defer done()
	return r.reconcile(ctx, req)
}

// reconcile reads the Sync and runs it: finalize, suspend, dependencies, then sync and the
// status write.
func (r *reconciler) reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := logr.FromContextOrDiscard(ctx).WithValues("sync", req.NamespacedName)
	ctx = logr.NewContext(ctx, log)
	s := &v1alpha1.Sync{}
	if err := r.client.Get(ctx, req.NamespacedName, s); err != nil {
		return ctrl.Result{}, r.forgetIfGone(req.NamespacedName, err)
	}
	turn, err := r.shards.Begin(ctx, s)
	if err != nil {
		return ctrl.Result{}, r.forgetIfGone(req.NamespacedName, err)
	}
	if turn.Sync == nil { // another replica's shard, or the cache behind a live read
		return ctrl.Result{RequeueAfter: turn.Requeue}, nil
	}
	defer turn.Done()
	ctx, s = turn.Ctx, turn.Sync
	if s, err = r.latest(ctx, s); s == nil {
		// Gone, or deleted and created again since the cache's copy: the new one is
		// reconciled when the cache shows it (its event starts that reconcile).
		return ctrl.Result{}, r.forgetIfGone(req.NamespacedName, err)
	}
	r.states.observe(req.NamespacedName, s.UID)
	if !s.DeletionTimestamp.IsZero() {
		// Being deleted: no more metric series, no drift reconciles.
		r.metrics.forget(req.NamespacedName)
		r.drift.untrack(req.NamespacedName)
		return r.finalize(ctx, s)
	}
	if !controllerutil.ContainsFinalizer(s, v1alpha1.Finalizer) {
		if err := r.patchFinalizers(ctx, s, func(s *v1alpha1.Sync) { controllerutil.AddFinalizer(s, v1alpha1.Finalizer) }); err != nil {
			return ctrl.Result{}, err
		}
	}
	if s.Spec.Suspend {
		log.V(1).Info("suspended")
		r.metrics.suspend(s)
		return ctrl.Result{}, nil
	}
	start := time.Now()
	if b := r.deps.check(ctx, s); b != nil {
		return r.awaitDependencies(ctx, s, b, start)
	}
	outcome, crash := r.sync(ctx, s)
	if crash == nil {
		crash = r.crash.call(r.crash.BeforeStatusWrite, s)
	}
	if crash != nil {
		return ctrl.Result{}, crash
	}
	return r.record(ctx, s, outcome, start)
}

// latest returns the Sync a reconcile of cached decides on: cached, or, when the cache is
// still behind our last status write of it, the API server's copy (status.Writer.Latest):
// drift detection and rollback go by the generation and revision the status says were
// applied, and a reconcile right after our write must see them. Nil when the Sync is gone
// (with the read's error) or the API server has another Sync of the name.
func (r *reconciler) latest(ctx context.Context, cached *v1alpha1.Sync) (*v1alpha1.Sync, error) {
	s, err := r.writer.Latest(ctx, client.ObjectKeyFromObject(cached), cached)
	if err != nil || s.UID != cached.UID {
		return nil, err
	}
	return s, nil
}

// record writes the outcome of one reconcile of s as its status, in its own step: an apply
// failure never stops it, and its failure never undoes the apply. It then says when to come
// back (after).
func (r *reconciler) record(ctx context.Context, s *v1alpha1.Sync, outcome status.Outcome, start time.Time) (ctrl.Result, error) {
	log := logr.FromContextOrDiscard(ctx)
	key := client.ObjectKeyFromObject(s)
	if i, refused := r.shards.Refused(ctx); refused {
		// The shard was not validly held for some of this reconcile's writes: its outcome
		// says nothing about the Sync. No status; the shard's holder (this replica again
		// once renewed, or another) reconciles it anew.
		log.Info("outcome dropped: the shard fence refused some of its writes; requeued", "shard", i)
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	outcome.Duration = time.Since(start) // kept on the history entry this outcome starts
	err := r.writer.Write(ctx, key, outcome)
	if errors.Is(err, status.ErrReplaced) {
		// The Sync this reconcile read was deleted and another took its name (I14): the
		// outcome is not about it. Reconcile the new one from its own read.
		log.Info("outcome dropped: the Sync was re-created", "uid", s.UID)
		return ctrl.Result{RequeueAfter: time.Millisecond}, nil
	}
	r.reconciled(s, outcome, start, err)
	r.drift.reconciled(key, time.Since(start))
	if err != nil {
		return ctrl.Result{}, err
	}
	if rollbackApplied(s, outcome) {
		rb := outcome.RolledBack
		r.events.Eventf(s, corev1.EventTypeWarning, reasonRolledBack, "rolled back from %s to %s: %s", rb.From, rb.To, rb.Reason)
	}
	r.notify(s, outcome)
	log.Info("reconciled", "revision", outcome.AttemptedRevision, "ready", outcome.Ready,
		"reason", outcome.Reason, "duration", time.Since(start).Round(time.Millisecond))
	return ctrl.Result{RequeueAfter: r.after(s, outcome)}, nil
}

// waiting records a Sync whose applied objects are not all Current: Progressing until its
// deadline (spec.timeout from the first reconcile that found this generation and revision
// waiting, read back from its status), HealthCheckFailed after it (judgeWait).
func (r *reconciler) waiting(s *v1alpha1.Sync, o status.Outcome, revision string, w waitState) status.Outcome {
	w.since, w.expired = waitOf(s, revision)
	w.now = time.Now()
	j := judgeWait(w)
	if j.ready == metav1.ConditionFalse {
		o.WaitOver = true
		return r.failed(s, o, retryable(j.reason, errors.New(j.message)))
	}
	o.Ready, o.Reason, o.Message = j.ready, j.reason, r.redact(s, j.message)
	r.succeeded(s)
	return o
}

// forget drops what the daemon keeps of the Sync key once it is gone: its syncState, and
// what forgetOutside registered. Deletions trigger no reconcile (syncChanged), so finalize
// calls it when the finalizer goes; a read that finds no Sync (forgetIfGone) calls it too.
func (r *reconciler) forget(key types.NamespacedName) {
	r.states.forget(key)
}

// forgetOutside registers what is kept per Sync outside its syncState, so that forgetting
// the Sync, or a Sync of another UID taking its name, drops it too: its metric series, the
// status writer's record of its last write, the holding of its shard it was last read live
// under, and its render. (The engine set registers its
// hold on the Sync's identity itself.)
func (r *reconciler) forgetOutside() {
	r.states.onForget(func(key types.NamespacedName, old syncState) {
		r.metrics.forget(key)
		r.writer.Forget(key)
		r.shards.Forget(key, old.uid) // not the live read of a Sync that took the name
		if r.loader != nil {
			r.loader.Forget(key.String())
			r.loader.Forget(pinnedOwner(key).String())
		}
	})
}

// reconciled records the metrics of one reconcile, the lead time's with the Sync's state.
func (r *reconciler) reconciled(s *v1alpha1.Sync, o status.Outcome, start time.Time, writeErr error) {
	key := client.ObjectKeyFromObject(s)
	var lead leadClock // only this Sync's reconciles, one at a time, touch it
	r.states.with(key, func(st *syncState) { lead = st.lead })
	r.metrics.reconciled(s, o, start, writeErr, &lead)
	r.states.with(key, func(st *syncState) { st.lead = lead })
}

// forgetIfGone forgets key when err says its Sync is not found (someone else dropped the
// finalizer, or the delete raced the read), and returns err without the not-found.
func (r *reconciler) forgetIfGone(key types.NamespacedName, err error) error {
	if apierrors.IsNotFound(err) {
		r.forget(key)
	}
	return client.IgnoreNotFound(err)
}

// sync does the work of one reconcile and describes it as an Outcome: render, apply, judge
// readiness. A failure of any step is in the outcome (Ready=False); the error only means a
// test crash point fired and nothing more may be written.
func (r *reconciler) sync(ctx context.Context, s *v1alpha1.Sync) (status.Outcome, error) {
	o := status.Outcome{UID: s.UID, Generation: s.Generation, HandledRequest: s.Annotations[v1alpha1.RequestedAtAnnotation]}
	q := r.quietFor(s)
	bundle, f := r.build(ctx, s, &o, q)
	if f != nil {
		return r.failed(s, o, f), nil
	}
	if err := r.crash.call(r.crash.AfterRender, s); err != nil {
		return o, err
	}
	res, opts, f := r.apply(ctx, s, &o, bundle, q)
	if f != nil {
		return withAutoRollback(s, r.failed(s, o, f)), nil // an object Failed: HealthCheckFailed at once
	}
	if names, details := notCurrent(res.Health); len(names) > 0 {
		// Applied, not all Current yet: recorded, judged again by a later reconcile; no
		// worker waits (applyOptions: CheckOnce).
		o = r.waiting(s, o, bundle.Revision, waitState{pending: names, details: details, timeout: opts.Timeout, held: res.Held})
		return withAutoRollback(s, o), nil
	}
	o.Ready, o.Reason = metav1.ConditionTrue, reasonSucceeded
	o.Message = "Applied revision " + bundle.Revision + verified(bundle.Signatures) + ignoreNote(res) + driftNote(o)
	if rb := o.RolledBack; rb != nil {
		o.Reason = reasonRolledBack
		o.Message += fmt.Sprintf(" (rolled back from %s: %s)", rb.From, rb.Reason)
	}
	if res.MigrationPending != "" {
		// Ready stays True (the revision is applied); a person must lift a refusal or settle
		// an object two legacy inventories list. The message is stable across runs: no churn.
		o.Message += "; " + r.redact(s, res.MigrationPending)
	}
	o.AppliedRevision = bundle.Revision
	r.succeeded(s)
	return o, nil
}

// build fetches and renders s's source, then decrypts and substitutes it (prepare), and
// records the revision it attempts in o. A failure applies and prunes nothing (I8). A kept
// render the engine answers for through q is not decoded (quiet.go): the Bundle is Unloaded.
func (r *reconciler) build(ctx context.Context, s *v1alpha1.Sync, o *status.Outcome, q *quietRun) (*sources.Bundle, *failure) {
	if err := checkBuildFields(s); err != nil {
		return nil, terminal(reasonBuildFailed, err)
	}
	src, err := r.source(ctx, s)
	if err != nil {
		return nil, retryable(fetchFailReason(err), err)
	}
	src.Overlay = overlay(s)
	helmSecrets, stalls, err := r.helm(ctx, s, &src)
	if err != nil {
		return nil, &failure{reason: reasonBuildFailed, err: err, stalls: stalls}
	}
	loadStart := time.Now()
	bundle, err := r.render.load(ctx, r.loader, src, client.ObjectKeyFromObject(s), q.unneeded())
	r.metrics.sourceLoaded(s, time.Since(loadStart))
	if bundle == nil {
		// A refused URL, an oversized or unverified commit is terminal.
		return nil, ofSource(fetchFailReason(err), err)
	}
	p := pin(s, bundle.Revision)
	r.states.with(client.ObjectKeyFromObject(s), func(st *syncState) {
		st.lead.loaded = commitTime{bundle.Revision, bundle.CommitTime}
		if p == nil {
			st.rollbackChecked = "" // the head is applied: the inventory may gain CRDs
		}
	})
	o.AttemptedRevision, o.RollbackKnown = bundle.Revision, true
	if p != nil {
		var f *failure
		if bundle, f = r.rollBack(ctx, s, o, src, p); f != nil {
			return nil, f
		}
		err = nil // the head's render error is not the revision applied
	} else if rb := s.Status.RolledBack; rb != nil {
		if r.loader != nil {
			r.loader.Forget(pinnedOwner(client.ObjectKeyFromObject(s)).String()) // the pin is lifted: its render goes
		}
		if rb.Automatic && rb.To == "" && rb.From == bundle.Revision {
			kept := *rb
			o.RolledBack = &kept // a refused automatic rollback is not tried again for this head
		}
	}
	if err != nil && !(errors.Is(err, sources.ErrEmptyRender) && s.Spec.AllowEmpty) {
		return nil, ofSource(reasonBuildFailed, err) // bad input waits for a new revision
	}
	if bundle, err = r.prepare(ctx, s, bundle, helmSecrets); err != nil {
		return nil, prepareFailure(err)
	}
	return bundle, nil
}

// apply applies bundle as s's set with the engine of s's identity, after migrating a legacy
// inventory, and records in o what the apply did (summary, inventory, events). An Unloaded
// bundle is not applied: the engine's answer to q is what the apply would have done.
func (r *reconciler) apply(ctx context.Context, s *v1alpha1.Sync, o *status.Outcome, bundle *sources.Bundle, q *quietRun) (*engine.Result, engine.ApplyOptions, *failure) {
	opts := applyOptions(s)
	eng, err := r.engines.forSync(s)
	if err != nil {
		return nil, opts, retryable(reasonApplyFailed, err)
	}
	ref, err := migrateInventory(ctx, eng, s)
	if err != nil {
		if missingPart(err) {
			return nil, opts, terminal(reasonInventoryPartMissing, err)
		}
		return nil, opts, retryable(reasonApplyFailed, err)
	}
	// The objects the load decoded for this reconcile alone are handed over (Own): the
	// engine sets their metadata in place rather than copying it. Nothing reads them after.
	// Objects left as JSON (Docs) are decoded by the engine one at a time.
	set := engine.Set{Inventory: ref, Objects: bundle.Objects, Docs: bundle.Docs, Origins: bundle.Origins, Own: bundle.Own, Key: q.key(bundle.Key)}
	r.drift.track(set.Inventory.ID, client.ObjectKeyFromObject(s))
	opts.Recover = r.recovery(s) // read only if the inventory ConfigMap was lost
	opts.Drift = driftOptions(s, bundle.Revision)
	var res *engine.Result
	if bundle.Unloaded {
		res = q.res
	} else {
		res, err = eng.Apply(ctx, set, opts)
	}
	r.metrics.applied(s, bundle.Revision, res, err, bundle.Unloaded)
	sum := res.Summary() // zero for a nil result
	if res != nil {
		o.Summary = &v1alpha1.Summary{Created: sum.Created, Configured: sum.Configured, Unchanged: sum.Unchanged,
			Pruned: sum.Pruned, Skipped: sum.Skipped, Failed: sum.Failed, NotReady: sum.NotReady}
		r.recordEvents(s, bundle.Revision, sum)
		if res.Inventory != nil {
			o.Inventory = inventoryStatus(set.Inventory, res.Inventory)
		}
	}
	if err == nil {
		r.recordDrift(s, o, bundle.Revision, res)
	}
	if err != nil {
		if f := refuseRollbackOverBudget(o, bundle.Revision, err); f != nil {
			return nil, opts, f
		}
		f := &failure{reason: reasonApplyFailed, err: err, stalls: engine.IsTerminal(err)}
		switch {
		case missingPart(err):
			f = terminal(reasonInventoryPartMissing, err)
		case sum.NotReady > 0 && sum.Failed == 0:
			f.reason, o.WaitOver = reasonHealthCheck, true
		}
		return nil, opts, f
	}
	return res, opts, nil
}

// missingPart reports an inventory that lists a part ConfigMap that is gone: no retry reads
// it, a person must restore the part or accept the loss (the error says how), so the Sync is
// Stalled and reconciled again at its interval, not with back-off.
func missingPart(err error) bool {
	var mp *inventory.MissingPartError
	return errors.As(err, &mp)
}

// failure is why a reconcile stopped short of applying its revision: the Ready=False reason,
// the error its message tells, and whether it stalls the Sync (no retry mends it: it waits
// for a new revision or an edit of its spec, reconciled at its interval) or is retried with
// back-off.
type failure struct {
	reason string
	err    error
	stalls bool
}

// retryable is a failure the next attempt may not meet (the network, the API server, a
// Secret not there yet): retried with back-off.
func retryable(reason string, err error) *failure { return &failure{reason: reason, err: err} }

// terminal is a failure no retry mends: it stalls the Sync.
func terminal(reason string, err error) *failure {
	return &failure{reason: reason, err: err, stalls: true}
}

// ofSource is a failure that stalls when it comes from the source's content (bad input, an
// empty render, a refused or unverified revision) rather than from the environment.
func ofSource(reason string, err error) *failure {
	return &failure{reason: reason, err: err, stalls: sources.IsTerminal(err)}
}

// failed turns o into the outcome of f: Ready=False with f's reason and redacted message,
// Stalled when f stalls, and a Warning event.
func (r *reconciler) failed(s *v1alpha1.Sync, o status.Outcome, f *failure) status.Outcome {
	msg := r.redact(s, f.err.Error())
	o.Ready, o.Reason, o.Message, o.Stalled = metav1.ConditionFalse, f.reason, msg, f.stalls
	r.events.Event(s, corev1.EventTypeWarning, f.reason, truncate(msg, 1024))
	return o
}

// source turns the Sync spec and its secret into a sources.Source.
func (r *reconciler) source(ctx context.Context, s *v1alpha1.Sync) (sources.Source, error) {
	if s.Spec.Source.OCI != nil {
		return r.ociSource(ctx, s)
	}
	if s.Spec.Source.HelmRepository != nil {
		return r.chartSource(ctx, s)
	}
	g := s.Spec.Source.Git
	if g == nil {
		return sources.Source{}, errors.New("spec.source: set one of git, oci and helmRepository")
	}
	repo := git.Repository{URL: g.URL, Ref: git.Ref{Branch: g.Ref.Branch, Tag: g.Ref.Tag, SemVer: g.Ref.SemVer, Commit: g.Ref.Commit}}
	if repo.Ref == (git.Ref{}) {
		repo.Ref.Branch = "main"
	}
	if g.SecretRef != nil {
		// Read as the Sync's identity, not the daemon's: its credentials go to a URL the
		// Sync's author chose, so only who may read the Secret may name it (I13).
		sec, err := r.engines.secret(ctx, s, g.SecretRef.Name)
		if err != nil {
			return sources.Source{}, fmt.Errorf("spec.source.git.secretRef: Secret %s/%s read as %s: %w",
				s.Namespace, g.SecretRef.Name, r.engines.identity(s), err)
		}
		repo.Auth = git.Auth{
			Username: string(sec.Data["username"]), Password: string(sec.Data["password"]),
			BearerToken: string(sec.Data["bearerToken"]), SSHPrivateKey: sec.Data["identity"],
			SSHKnownHosts: sec.Data["known_hosts"],
		}
	}
	var err error
	if repo.Verify, err = r.verification(ctx, s); err != nil {
		return sources.Source{}, err
	}
	return sources.Source{Git: repo, Path: s.Spec.Path}, nil
}

func applyOptions(s *v1alpha1.Sync) engine.ApplyOptions {
	opts := engine.DefaultApplyOptions()
	opts.Prune, opts.Wait = s.Spec.Prune, s.Spec.Wait
	// Readiness is judged by one read per reconcile, never by a worker waiting (waiting).
	opts.CheckOnce = true
	opts.AllowEmpty, opts.PruneBudget, opts.Force = s.Spec.AllowEmpty, s.Spec.PruneBudget, s.Spec.Force
	opts.Adopt = s.Spec.Adopt
	if s.Spec.TakeOverManagers != nil { // unset: the engine's default list; empty: none
		opts.TakeOverManagers = *s.Spec.TakeOverManagers
	}
	opts.Ignore = ignoreRules(s)
	opts.DefaultNamespace, opts.TargetNamespace = s.Namespace, s.Spec.TargetNamespace
	if s.Spec.Source.Helm != nil {
		// As `helm install -n`: a chart's objects without a namespace go to the release's.
		opts.DefaultNamespace = releaseNamespace(s)
	}
	if s.Spec.Timeout != nil {
		opts.Timeout = s.Spec.Timeout.Duration
	}
	for _, hc := range s.Spec.HealthChecks {
		opts.HealthChecks = append(opts.HealthChecks, object.ObjMetadata{Namespace: hc.Namespace, Name: hc.Name,
			GroupKind: schema.FromAPIVersionAndKind(hc.APIVersion, hc.Kind).GroupKind()})
	}
	for _, x := range s.Spec.HealthCheckExprs {
		opts.HealthExprs = append(opts.HealthExprs, engine.HealthExpr{APIVersion: x.APIVersion, Kind: x.Kind,
			Current: x.Current, InProgress: x.InProgress, Failed: x.Failed})
	}
	return opts
}

func (r *reconciler) recordEvents(s *v1alpha1.Sync, revision string, sum engine.Summary) {
	if sum.Created+sum.Configured > 0 {
		r.events.Eventf(s, corev1.EventTypeNormal, "Applied", "revision %s: %d created, %d configured", revision, sum.Created, sum.Configured)
	}
	if sum.Pruned > 0 {
		r.events.Eventf(s, corev1.EventTypeNormal, "Pruned", "revision %s: %d pruned", revision, sum.Pruned)
	}
}

// patchFinalizers changes metadata.finalizers with an optimistic lock.
func (r *reconciler) patchFinalizers(ctx context.Context, s *v1alpha1.Sync, mutate func(*v1alpha1.Sync)) error {
	base := s.DeepCopy()
	mutate(s)
	err := r.client.Patch(ctx, s, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsConflict(err) {
		return fmt.Errorf("finalizer of %s/%s: %w (will retry)", s.Namespace, s.Name, err)
	}
	return err
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
