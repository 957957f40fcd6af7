package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/converge-dev/converge/cmd/converge/daemon/webhook"
	"github.com/converge-dev/converge/cmd/converge/internal/scheme"
	"github.com/converge-dev/converge/status"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// setLogger sets controller-runtime's global logger once: daemons started together in one
// process (tests, a library user) would otherwise race on it.
var setLogger sync.Once

// Run installs the CRD, applies the quick-start Sync and reconciles Syncs until ctx ends.
// It returns the fence's error when the process was paused past the leader lease's renew
// deadline (see pauseFence), so that the process exits and restarts as a follower.
func Run(ctx context.Context, cfg *rest.Config, o Options) error {
	setLogger.Do(func() { ctrl.SetLogger(klog.NewKlogr()) })
	if err := o.Validate(); err != nil {
		return err
	}
	reg, metrics, err := newMetricsRegistry()
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(metrics.instrument)
	o.defaultLeaderTimings()
	if o.LeaderElect || o.sharded() {
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		startPauseFence(ctx, cfg, o.RenewDeadline, cancel)
	}
	var shards *sharding
	if o.sharded() {
		if shards, reg, err = newSharding(cfg, reg, o); err != nil {
			return err
		}
	}
	s := scheme.New()
	if err := retryStartup(ctx, "preparing the cluster", func(ctx context.Context) error { return prepare(ctx, cfg, s, o) }); err != nil {
		return err
	}
	mgr, err := newManager(cfg, s, o)
	if err != nil {
		return err
	}
	if err := addServers(mgr, reg, o); err != nil {
		return err
	}
	if err := warmSyncMapping(ctx, mgr); err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	r := newReconciler(ctx, mgr, cfg, metrics, o)
	if err := addNotifier(ctx, mgr, cfg, r, o); err != nil {
		return fmt.Errorf("notifications: %w", err)
	}
	if shards != nil {
		if err := shards.setup(mgr, cfg, s, r, o); err != nil {
			return fmt.Errorf("sharding: %w", err)
		}
	}
	if err := r.SetupWithManager(ctx, mgr); err != nil {
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

// prepare does what must be done before the manager starts, with a direct client: the
// CRD (the manager's cache watches Syncs), the leader-election namespace, the quick start.
func prepare(ctx context.Context, cfg *rest.Config, s *runtime.Scheme, o Options) error {
	direct, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		return err
	}
	if o.InstallCRD {
		if err := installSyncCRD(ctx, cfg, direct); err != nil {
			return err
		}
	}
	if o.LeaderElect || o.sharded() {
		if err := ensureNamespace(ctx, direct, o.LeaderNamespace); err != nil {
			return err
		}
	}
	if q := o.QuickStart; q.GitURL != "" && o.DefaultServiceAccount != "" {
		// The quick start Sync sets no serviceAccountName: it is a tenant's Sync like any other.
		ctrl.Log.WithName("quickstart").Info("the quick start Sync acts as the default service account: it needs a ServiceAccount and RBAC in its namespace",
			"user", "system:serviceaccount:"+q.Namespace+":"+o.DefaultServiceAccount)
	}
	return o.QuickStart.apply(ctx, direct)
}

// newManager is the controller-runtime manager: the cache (one namespace or all), the
// health probes and leader election. Its own metrics server is off: the daemon serves its
// own registry (addServers).
func newManager(cfg *rest.Config, s *runtime.Scheme, o Options) (ctrl.Manager, error) {
	// The cached Syncs keep no managedFields: nothing reads them, and the status writer's
	// merge patch leaves them out either way. Nor do they keep the recovery copy of their
	// inventory, only its digest (status.CompactInventory): every replica caches every Sync,
	// and the copy is most of a Sync's bytes.
	strip := cache.TransformStripManagedFields()
	syncs := cache.ByObject{Transform: func(obj any) (any, error) {
		obj, err := strip(obj)
		if err != nil {
			return nil, err
		}
		return status.CompactInventory(obj)
	}}
	if sel, _ := labels.Parse(o.WatchLabelSelector); !sel.Empty() { // validated by Run
		syncs.Label = sel
	}
	cacheOpts := cache.Options{DefaultTransform: strip, ByObject: map[client.Object]cache.ByObject{&v1alpha1.Sync{}: syncs}}
	if o.WatchNamespace != "" {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{o.WatchNamespace: {}}
		for _, ns := range o.test.alsoWatch {
			cacheOpts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        s,
		Cache:                         cacheOpts,
		Metrics:                       metricsserver.Options{BindAddress: "0"}, // we serve our own registry
		HealthProbeBindAddress:        o.HealthAddr,
		LeaderElection:                o.LeaderElect && !o.sharded(), // sharded: every replica runs the controller
		LeaderElectionID:              o.leaderElectionID(),
		LeaderElectionNamespace:       o.LeaderNamespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 ptr.To(o.LeaseDuration),
		RenewDeadline:                 ptr.To(o.RenewDeadline),
		RetryPeriod:                   ptr.To(o.RetryPeriod),
		GracefulShutdownTimeout:       ptr.To(30 * time.Second),
	})
	if err != nil {
		return nil, fmt.Errorf("manager: %w", err)
	}
	return mgr, nil
}

// addServers adds the Runnables that serve on every replica: /metrics (and pprof), the
// webhook receiver, and the health checks.
func addServers(mgr ctrl.Manager, reg prometheus.Gatherer, o Options) error {
	if o.MetricsAddr != "0" && o.MetricsAddr != "" {
		if err := mgr.Add(newMetricsServer(o.MetricsAddr, reg, o.Pprof)); err != nil {
			return err
		}
	}
	if o.WebhookAddr != "" {
		hook, err := webhook.New(webhook.Config{Addr: o.WebhookAddr, Syncs: mgr.GetClient(), Client: mgr.GetClient(),
			REST: mgr.GetConfig(), User: func(s *v1alpha1.Sync) string { return actsAs(s, o.DefaultServiceAccount) },
			Log: mgr.GetLogger().WithName("webhook"), Options: o.test.webhook})
		if err != nil {
			return err
		}
		if err := mgr.Add(hook.Runnable()); err != nil {
			return err
		}
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	return mgr.AddReadyzCheck("ping", healthz.Ping)
}
