package main

import (
	"errors"
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/converge-dev/converge/cmd/converge/daemon"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// errWebhookSecretFileRemoved refuses the removed --webhook-secret-file: one secret signed
// for every Sync let any tenant who knew it trigger any Sync (I13).
var errWebhookSecretFileRemoved = errors.New("--webhook-secret-file was removed: one secret signed for every Sync; " +
	"give each Sync its own in spec.webhook.secretRef (a Secret with the key \"token\" in the Sync's namespace)")

// daemonGCPercent is the daemon's collector target when GOGC is not set: the heap may grow
// to 1.5 times what was live at the last collection, not twice. A reconcile holds its render
// and its prepared items at once, and the collector's headroom over them is the largest part
// of the daemon's peak: at 10,000 objects 50 instead of 100 took the peak RSS from 185 to
// 160 MB, for twice as many collections (docs/benchmarks.md, "The collector's target").
const daemonGCPercent = 50

// setCollectorTarget sets the daemon's collector target (daemonGCPercent) unless GOGC says
// otherwise: GOGC=100 restores Go's default. GOMEMLIMIT still bounds the heap as a whole.
func setCollectorTarget() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(daemonGCPercent)
	}
}

func newRunCommand(kube *kubeFlags) *cobra.Command {
	o := daemon.DefaultOptions()
	var webhookSecretFile string // removed: refused with a pointer to spec.webhook
	var quickRef refFlags
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
			if webhookSecretFile != "" {
				return errWebhookSecretFileRemoved
			}
			ref, err := quickRef.resolve()
			if err != nil {
				return err
			}
			o.NoCrossNamespaceRefsSet = cmd.Flags().Changed("no-cross-namespace-refs")
			o.QuickStart.Ref = v1alpha1.GitRef{Branch: ref.Branch, Tag: ref.Tag, SemVer: ref.SemVer, Commit: ref.Commit}
			if err := o.Validate(); err != nil {
				return err
			}
			cfg, err := kube.restConfig()
			if err != nil {
				return err
			}
			o.QuickStart.Namespace = kube.namespace()
			setCollectorTarget()
			return daemon.Run(cmd.Context(), cfg, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.MetricsAddr, "metrics-addr", o.MetricsAddr, "address of /metrics (\"0\" disables)")
	f.BoolVar(&o.Pprof, "pprof", o.Pprof, "also serve Go's profiles (/debug/pprof/) on the metrics address")
	f.StringVar(&o.HealthAddr, "health-addr", o.HealthAddr, "address of /healthz and /readyz")
	f.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "elect a leader (Lease) so only one replica reconciles")
	f.StringVar(&o.Replica, "replica-name", o.Replica, "this replica's name, in Sync status and in the Leases replicas coordinate through (default: $POD_NAME, else the host name)")
	f.StringVar(&o.Sharding, "sharding", o.Sharding, "how replicas share the Syncs: \"off\" (one elected leader reconciles every Sync) or \"auto\" (every replica reconciles the Syncs of the shards it holds; shard Leases in --leader-election-namespace, moved between live replicas by themselves)")
	f.IntVar(&o.Shards, "shards", o.Shards, "with --sharding=auto, the number of shards (1..256) the Syncs are split into by a hash of their UID; every replica must use the same number")
	f.StringVar(&o.LeaderNamespace, "leader-election-namespace", o.LeaderNamespace, "namespace of the leader-election Lease")
	f.DurationVar(&o.LeaseDuration, "leader-election-lease-duration", o.LeaseDuration, "how long followers wait before taking over an unrenewed lease")
	f.DurationVar(&o.RenewDeadline, "leader-election-renew-deadline", o.RenewDeadline, "how long the leader keeps trying to renew before it stops leading; a leader paused longer than this sends no more writes and exits")
	f.DurationVar(&o.RetryPeriod, "leader-election-retry-period", o.RetryPeriod, "how often leader-election clients retry")
	f.DurationVar(&o.DeletionGrace, "deletion-grace", o.DeletionGrace, "how long a Sync's deletion may be refused with 401/403 (its service account lost its rights) before the finalizer is dropped with a Warning event listing what was left")
	f.StringVar(&o.DefaultServiceAccount, "default-service-account", o.DefaultServiceAccount, "service account, in each Sync's own namespace, that a Sync without spec.serviceAccountName impersonates for apply, prune, readiness and deletion (multi-tenant lockdown); empty: such a Sync acts with the daemon's own rights (single-tenant)")
	f.BoolVar(&o.NoCrossNamespaceRefs, "no-cross-namespace-refs", o.NoCrossNamespaceRefs, "refuse a Sync's spec.dependsOn entry in another namespace (the Sync is Stalled, nothing applied), and do not let a dependent in another namespace hold up a deletion (default: on with --default-service-account, off without; =false re-opens them under lockdown)")
	f.BoolVar(&o.InstallCRD, "install-crd", o.InstallCRD, "server-side apply the Sync CRD at start")
	f.BoolVar(&o.WatchCache, "watch-cache", o.WatchCache, "keep a watch cache of managed kinds so unchanged objects cost no request (needs list/watch RBAC on them)")
	f.BoolVar(&o.DriftReconcile, "reconcile-on-drift", o.DriftReconcile, "with --watch-cache, reconcile a Sync within seconds when one of its objects is edited or deleted out of band, not only at its interval")
	f.StringVar(&o.WebhookAddr, "webhook-addr", o.WebhookAddr, "address of the push webhook receiver, POST /hooks/<namespace>/<name>, each Sync signed by the Secret its spec.webhook.secretRef names (off when empty)")
	f.StringVar(&o.ClusterName, "cluster-name", o.ClusterName, "name of this cluster in notifications; keys the commit statuses they set (converge/<cluster>/<namespace>/<name>), needed by github, gitlab and gitea notifications (none when empty)")
	f.StringVar(&webhookSecretFile, "webhook-secret-file", "", "removed: each Sync names its own webhook Secret in spec.webhook.secretRef")
	_ = f.MarkHidden("webhook-secret-file")
	f.StringVar(&o.WatchNamespace, "watch-namespace", o.WatchNamespace, "reconcile only the Syncs of this namespace (default: all namespaces)")
	f.StringVar(&o.WatchLabelSelector, "watch-label-selector", o.WatchLabelSelector, "reconcile only the Syncs whose labels match this selector, for static sharding with one Deployment per shard (\"sharding.fluxcd.io/key in (shard1)\"); each selector elects its own leader")
	f.IntVar(&o.Concurrency, "concurrent", o.Concurrency, "Syncs reconciled in parallel")
	f.IntVar(&o.MaxConcurrentPerNamespace, "max-concurrent-per-namespace", o.MaxConcurrentPerNamespace, "of the --concurrent workers, how many may reconcile Syncs of one namespace at once, so one namespace's slow or many Syncs cannot hold them all while others wait; a Sync over its namespace's share is tried again a second later (0: by demand, all workers but one for a namespace alone, an even share, at least 1, among the namespaces with Syncs running or waiting)")
	f.StringVar(&o.CacheDir, "git-cache-dir", o.CacheDir, "where git repositories are cached")
	f.Int64Var(&o.GitCacheQuota, "git-cache-quota", o.GitCacheQuota, "bytes the git cache may hold on disk: least recently used repositories no fetch holds are removed to fit, a repository over it alone fails its Sync (FetchFailed); keep it below the cache volume's size (0: no limit)")
	f.Int64Var(&o.OCICacheQuota, "oci-cache-quota", o.OCICacheQuota, "bytes the extracted OCI artifacts may hold on disk, beside --git-cache-dir (DIR-oci): least recently used artifacts no fetch holds are removed to fit, an artifact (or layer) over it alone fails its Sync (FetchFailed) (0: no limit)")
	f.Int64Var(&o.ChartCacheQuota, "chart-cache-quota", o.ChartCacheQuota, "bytes the charts fetched from HTTP Helm repositories may hold on disk, beside --git-cache-dir (DIR-charts): least recently used charts no fetch holds are removed to fit (0: no limit)")
	f.Int64Var(&o.MaxIndexSize, "max-index-size", o.MaxIndexSize, "bytes a Helm repository's index.yaml may have; a larger one fails its Sync (FetchFailed)")
	f.BoolVar(&o.AllowLocalGit, "allow-local-git", o.AllowLocalGit, "let Syncs reach repositories and OCI registries on this machine: file:// URLs and local paths (never the git cache) and git servers or registries on loopback, link-local (169.254.169.254), unspecified or multicast addresses")
	f.DurationVar(&o.BuildTimeout, "build-timeout", o.BuildTimeout, "time allowed to fetch and render one Sync's source; a render still running is stopped")
	f.DurationVar(&o.FetchTimeout, "fetch-timeout", o.FetchTimeout, "time allowed to fetch one Sync's git source, connection and handshake included (at most --build-timeout); a remote that does not answer or answers too slowly fails the Sync with FetchFailed")
	f.Int64Var(&o.MaxFetchSize, "max-fetch-size", o.MaxFetchSize, "refuse a git fetch that downloads more bytes than this (ref listings and packs, HTTP and SSH)")
	addLimitFlags(f, &o.Limits)
	f.Int64Var(&o.RenderCacheSize, "render-cache-size", o.RenderCacheSize, "bytes of rendered objects (kept as compressed JSON) kept for the next reconciles; the least recently used renders are dropped past it and rendered again when needed")
	addQuickStartFlags(cmd, &o.QuickStart, &quickRef)
	return cmd
}

// addQuickStartFlags binds the quick-start flags of `converge run` onto q, and its git ref
// onto ref: the same --ref flags as build and apply (default: branch main). --tag,
// --semver and --commit are hidden, deprecated spellings of --ref-*.
func addQuickStartFlags(cmd *cobra.Command, q *daemon.QuickStart, ref *refFlags) {
	f := cmd.Flags()
	f.StringVar(&q.GitURL, "git-url", q.GitURL, "quick start: create and own a Sync for this repository")
	ref.bind(cmd, "quick start: ")
	for name, v := range map[string]*string{"tag": &ref.tag, "semver": &ref.semver, "commit": &ref.commit} {
		f.StringVar(v, name, "", "quick start: use --ref-"+name)
		_ = f.MarkDeprecated(name, "use --ref-"+name+" (or --ref "+name+":VALUE)")
	}
	f.StringVar(&q.Path, "path", q.Path, "quick start: folder in the repository")
	f.StringVar(&q.Name, "name", q.Name, "quick start: name of the Sync (in -n NAMESPACE)")
	f.DurationVar(&q.Interval, "interval", q.Interval, "quick start: resync interval")
	f.BoolVar(&q.Prune, "prune", q.Prune, "quick start: delete objects that left the repository")
}
