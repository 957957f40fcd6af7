package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/sources/git"
	"github.com/converge-dev/converge/status"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// runOptions are the flags of `converge run`.
type runOptions struct {
	metricsAddr, healthAddr string
	pprof                   bool
	leaderElect             bool
	leaderNamespace         string
	leaseDuration           time.Duration
	renewDeadline           time.Duration
	retryPeriod             time.Duration
	installCRD              bool
	watchCache              bool
	driftReconcile          bool
	watchNamespace          string
	webhookAddr             string
	webhookSecretFile       string // removed: refused with a pointer to spec.webhook
	webhook                 webhookOptions
	concurrency             int
	cacheDir                string
	allowLocalGit           bool
	buildTimeout            time.Duration
	maxFetchSize            int64
	limits                  sources.Limits
	quick                   quickStart
	crash                   crashPoints // test-only crash points
	deletionGrace           time.Duration
}

func newRunCommand(kube *kubeFlags) *cobra.Command {
	o := runOptions{}
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the daemon: reconcile Sync objects until stopped",
		Long: `Run the converge daemon. It watches Sync objects (converge.dev/v1alpha1) and keeps each
one's git path applied: fetch, render, server-side apply, prune, wait for readiness, and one
status write per reconcile.

With --git-url it also creates and owns one Sync from its flags (a quick start with no CRD
authoring).`,
		Example: `  # reconcile every Sync in the cluster
  converge run

  # quick start: sync one repository path, resync every minute
  converge run --git-url https://github.com/org/apps.git --ref main --path overlays/prod --interval 1m`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDaemon(cmd.Context(), kube, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.metricsAddr, "metrics-addr", ":8080", "address of /metrics (\"0\" disables)")
	f.BoolVar(&o.pprof, "pprof", false, "also serve Go's profiles (/debug/pprof/) on the metrics address")
	f.StringVar(&o.healthAddr, "health-addr", ":8081", "address of /healthz and /readyz")
	f.BoolVar(&o.leaderElect, "leader-elect", true, "elect a leader (Lease) so only one replica reconciles")
	f.StringVar(&o.leaderNamespace, "leader-election-namespace", "converge-system", "namespace of the leader-election Lease")
	f.DurationVar(&o.leaseDuration, "leader-election-lease-duration", 15*time.Second, "how long followers wait before taking over an unrenewed lease")
	f.DurationVar(&o.renewDeadline, "leader-election-renew-deadline", 10*time.Second, "how long the leader keeps trying to renew before it stops leading; a leader paused longer than this sends no more writes and exits")
	f.DurationVar(&o.retryPeriod, "leader-election-retry-period", 2*time.Second, "how often leader-election clients retry")
	f.DurationVar(&o.deletionGrace, "deletion-grace", defaultDeletionGrace, "how long a Sync's deletion may be refused with 401/403 (its service account lost its rights) before the finalizer is dropped with a Warning event listing what was left")
	f.BoolVar(&o.installCRD, "install-crd", true, "server-side apply the Sync CRD at start")
	f.BoolVar(&o.watchCache, "watch-cache", true, "keep a watch cache of managed kinds so unchanged objects cost no request (needs list/watch RBAC on them)")
	f.BoolVar(&o.driftReconcile, "reconcile-on-drift", true, "with --watch-cache, reconcile a Sync within seconds when one of its objects is edited or deleted out of band, not only at its interval")
	f.StringVar(&o.webhookAddr, "webhook-addr", "", "address of the push webhook receiver, POST /hooks/<namespace>/<name>, each Sync signed by the Secret its spec.webhook.secretRef names (off when empty)")
	f.StringVar(&o.webhookSecretFile, "webhook-secret-file", "", "removed: each Sync names its own webhook Secret in spec.webhook.secretRef")
	_ = f.MarkHidden("webhook-secret-file")
	f.StringVar(&o.watchNamespace, "watch-namespace", "", "reconcile only the Syncs of this namespace (default: all namespaces)")
	f.IntVar(&o.concurrency, "concurrent", 4, "Syncs reconciled in parallel")
	f.StringVar(&o.cacheDir, "git-cache-dir", filepath.Join(os.TempDir(), "converge-cache"), "where git repositories are cached")
	f.BoolVar(&o.allowLocalGit, "allow-local-git", false, "let Syncs reach repositories on this machine: file:// URLs and local paths (never the git cache) and git servers on loopback, link-local (169.254.169.254), unspecified or multicast addresses")
	f.DurationVar(&o.buildTimeout, "build-timeout", defaultBuildTimeout, "time allowed to fetch and render one Sync's source; a render still running is stopped")
	f.Int64Var(&o.maxFetchSize, "max-fetch-size", git.DefaultMaxFetchSize, "refuse a git fetch that downloads more bytes than this (ref listings and packs, HTTP and SSH)")
	addLimitFlags(f, &o.limits)
	o.quick.addFlags(cmd)
	return cmd
}

func runDaemon(ctx context.Context, kube *kubeFlags, o runOptions) error {
	cfg, err := kube.restConfig()
	if err != nil {
		return err
	}
	return serve(ctx, cfg, kube.namespace(), o)
}

// serve installs the CRD, applies the quick-start Sync and runs the manager until ctx ends.
func serve(ctx context.Context, cfg *rest.Config, namespace string, o runOptions) error {
	if o.webhookSecretFile != "" {
		// One secret for every Sync let any tenant who knew it trigger any Sync (I13).
		return errors.New("--webhook-secret-file was removed: one secret signed for every Sync; " +
			"give each Sync its own in spec.webhook.secretRef (a Secret with the key \"token\" in the Sync's namespace)")
	}
	ctrl.SetLogger(klog.NewKlogr())
	reg, metrics, err := newMetricsRegistry()
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(metrics.instrument)
	o.defaultLeaderTimings()
	if o.leaderElect {
		// S03: a leader paused past its renew deadline sends no more writes and stops.
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		fence := newPauseFence(o.renewDeadline, stopOnFence(cancel))
		go fence.run(ctx)
		cfg.Wrap(fence.wrap)
	}
	scheme := newScheme()
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	if o.installCRD {
		if err := installSyncCRD(ctx, direct); err != nil {
			return err
		}
	}
	if o.leaderElect {
		if err := ensureNamespace(ctx, direct, o.leaderNamespace); err != nil {
			return err
		}
	}
	if err := o.quick.apply(ctx, direct, namespace); err != nil {
		return err
	}
	var cacheOpts cache.Options
	if o.watchNamespace != "" {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{o.watchNamespace: {}}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Cache:                         cacheOpts,
		Metrics:                       metricsserver.Options{BindAddress: "0"}, // we serve our own registry
		HealthProbeBindAddress:        o.healthAddr,
		LeaderElection:                o.leaderElect,
		LeaderElectionID:              "converge-leader",
		LeaderElectionNamespace:       o.leaderNamespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 ptrDuration(o.leaseDuration),
		RenewDeadline:                 ptrDuration(o.renewDeadline),
		RetryPeriod:                   ptrDuration(o.retryPeriod),
		GracefulShutdownTimeout:       ptrDuration(30 * time.Second),
	})
	if err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	if o.metricsAddr != "0" && o.metricsAddr != "" {
		if err := mgr.Add(newMetricsServer(o.metricsAddr, reg, o.pprof)); err != nil {
			return err
		}
	}
	if o.webhookAddr != "" {
		if o.webhook == (webhookOptions{}) {
			o.webhook = defaultWebhookOptions()
		}
		hook := &webhook{addr: o.webhookAddr, syncs: mgr.GetClient(), secrets: mgr.GetAPIReader(), client: mgr.GetClient(),
			log: mgr.GetLogger().WithName("webhook"), opts: o.webhook}
		if err := mgr.Add(hook.runnable()); err != nil {
			return err
		}
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	drift := newDriftTrigger()
	engOpts := engine.Options{Hooks: o.crash.Engine}
	if o.watchCache && o.driftReconcile {
		engOpts.Changed = drift.changed
	} else {
		drift = nil
	}
	r := &reconciler{
		client:  mgr.GetClient(),
		live:    mgr.GetAPIReader(),
		loader:  sources.NewLoader(o.cacheDir),
		render:  renderSettings{timeout: o.buildTimeout, limits: o.limits, allowLocalGit: o.allowLocalGit, maxFetchSize: o.maxFetchSize},
		engines: newEngineSet(ctx, cfg, engOpts, o.watchCache),
		drift:   drift,
		crash:   o.crash,
		writer:  &status.Writer{Cached: mgr.GetClient(), Live: mgr.GetAPIReader(), Client: conflictCounting{mgr.GetClient(), metrics}},
		events:  mgr.GetEventRecorderFor("converge"), //nolint:staticcheck // the events/v1 recorder needs a newer RBAC story
		retries: &retryCounter{},
		metrics: metrics,
		grace:   o.deletionGrace,
	}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.Sync{}, builder.WithPredicates(syncChanged{}))
	if drift != nil {
		b = b.WatchesRawSource(drift.source())
	}
	err = b.
		// Names are validated per process; tests run several daemons in one process.
		WithOptions(controller.Options{MaxConcurrentReconciles: o.concurrency, SkipNameValidation: &skipNameValidation}).
		Complete(r)
	if err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	if err := mgr.Start(ctx); err != nil {
		return err
	}
	if cause := context.Cause(ctx); errors.Is(cause, errFenced) {
		return cause
	}
	return nil
}

// defaultLeaderTimings fills unset leader-election timings with the flags' defaults
// (controller-runtime's).
func (o *runOptions) defaultLeaderTimings() {
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&o.leaseDuration, 15 * time.Second}, {&o.renewDeadline, 10 * time.Second}, {&o.retryPeriod, 2 * time.Second}} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
}

// syncChanged passes the Sync events that need a reconcile: another Sync under the same name
// (UID), a new generation (spec), a changed annotation (reconcile-now), deletion. Status-only
// updates, such as our own status writes, do not retrigger a reconcile.
type syncChanged struct{ predicate.Funcs }

func (syncChanged) Update(e event.UpdateEvent) bool {
	o, n := e.ObjectOld, e.ObjectNew
	if o == nil || n == nil {
		return true
	}
	return o.GetUID() != n.GetUID() || // a relist can fold a delete and a re-create into one update
		o.GetGeneration() != n.GetGeneration() ||
		o.GetAnnotations()[v1alpha1.RequestedAtAnnotation] != n.GetAnnotations()[v1alpha1.RequestedAtAnnotation] ||
		!n.GetDeletionTimestamp().IsZero()
}

func (syncChanged) Create(event.CreateEvent) bool   { return true }
func (syncChanged) Delete(event.DeleteEvent) bool   { return false }
func (syncChanged) Generic(event.GenericEvent) bool { return true }

func ensureNamespace(ctx context.Context, c client.Client, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		if apierrors.IsForbidden(err) {
			return nil // running with namespaced RBAC: the namespace is expected to exist
		}
		return fmt.Errorf("namespace %s: %w", name, err)
	}
	return nil
}

var skipNameValidation = true

func ptrDuration(d time.Duration) *time.Duration { return &d }
