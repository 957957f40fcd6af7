package daemon

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/converge-dev/converge/cmd/converge/daemon/notify"
	"github.com/converge-dev/converge/cmd/converge/daemon/webhook"
	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/sources/git"
	"github.com/converge-dev/converge/sources/helmrepo"
)

// Options configure the daemon. `converge run` binds its flags onto DefaultOptions(); a
// zero field falls back to the default where one is noted.
type Options struct {
	// MetricsAddr is the address of /metrics; "" or "0" disables it.
	MetricsAddr string
	// Pprof also serves Go's profiles (/debug/pprof/) on MetricsAddr.
	Pprof bool
	// HealthAddr is the address of /healthz and /readyz ("0" disables it).
	HealthAddr string

	// LeaderElect elects a leader (a Lease) so only one replica reconciles.
	LeaderElect bool
	// LeaderNamespace is the namespace of the leader-election Lease; it is created if missing.
	LeaderNamespace string
	// LeaseDuration, RenewDeadline and RetryPeriod are the leader-election timings
	// (controller-runtime's defaults when zero). A leader paused longer than RenewDeadline
	// sends no more writes and stops (the pause fence). With ShardingAuto they time the shard
	// Leases the same way: renewed every RetryPeriod, written for until RenewDeadline after the
	// last renew, taken over LeaseDuration after the last renew was seen.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration

	// Sharding is how replicas share the Syncs: ShardingOff ("" is off too), one leader
	// reconciles every Sync (LeaderElect); ShardingAuto, every replica reconciles the Syncs
	// of the shards it holds, each shard guarded by a Lease in LeaderNamespace, and live
	// replicas balance the shards among themselves (LeaderElect is then ignored).
	Sharding string
	// Shards is the number of shards with ShardingAuto (defaultShards when zero, at most
	// maxShards). A Sync's shard is a hash of its UID modulo Shards, so every replica of a
	// Deployment must use the same number.
	Shards int

	// Replica names this daemon process among its replicas: in Sync status (which replica
	// wrote it) and in the Leases replicas coordinate through. DefaultOptions sets it from
	// $POD_NAME (the Deployment passes the pod's name), else the host name.
	Replica string

	// InstallCRD server-side applies the Sync CRD at start.
	InstallCRD bool
	// WatchCache keeps a watch cache of the managed kinds, so unchanged objects cost no
	// request (needs list/watch RBAC on them).
	WatchCache bool
	// DriftReconcile, with WatchCache, reconciles a Sync within seconds when one of its
	// objects is edited or deleted out of band, not only at its interval.
	DriftReconcile bool
	// WatchNamespace limits the daemon to the Syncs of one namespace ("" is all).
	WatchNamespace string
	// WatchLabelSelector limits the daemon to the Syncs whose labels match it ("" is all),
	// as Flux's --watch-label-selector: static sharding, one Deployment per shard (such as
	// "sharding.fluxcd.io/key in (shard1)"). Each selector elects its own leader. A Sync
	// moved to another shard by a label change is dropped by one daemon and taken by the
	// other; dependsOn and webhooks only see the Syncs of the same shard.
	WatchLabelSelector string
	// Concurrency is how many Syncs are reconciled in parallel.
	Concurrency int
	// MaxConcurrentPerNamespace is how many of those may be of one namespace at once (at
	// most Concurrency). Zero shares them by demand (namespaceShare): a namespace alone may
	// use all but one, and namespaces with Syncs running or waiting share them evenly, at
	// least one each. A reconcile over its namespace's share is deferred for a second,
	// reading and writing nothing.
	MaxConcurrentPerNamespace int
	// DefaultServiceAccount is the service account, in the Sync's own namespace, that a
	// Sync without spec.serviceAccountName impersonates for everything it does (apply,
	// prune, readiness reads, deletion), as Flux's --default-service-account does. Empty
	// (the default) is single-tenant: such a Sync acts with the daemon's rights, so anyone
	// who may create a Sync can write anywhere the daemon can. Set it, with RBAC per
	// namespace, when tenants share the daemon.
	DefaultServiceAccount string
	// NoCrossNamespaceRefs refuses a Sync's spec.dependsOn entry in another namespace (the
	// Sync is Stalled, nothing applied), and a dependent in another namespace does not hold
	// up a deletion, as Flux's --no-cross-namespace-refs. Off, one tenant's Sync may wait
	// for (learning whether they exist and are Ready), and hold up the deletion of, another
	// namespace's Syncs. DefaultServiceAccount (lockdown) turns it on unless
	// NoCrossNamespaceRefsSet says it was given explicitly (crossNamespaceRefused).
	NoCrossNamespaceRefs bool
	// NoCrossNamespaceRefsSet is true when NoCrossNamespaceRefs was given explicitly (the
	// flag on the command line): its value then stands under lockdown too, so
	// --no-cross-namespace-refs=false re-opens cross-namespace references.
	NoCrossNamespaceRefsSet bool
	// DeletionGrace is how long a Sync's deletion may be refused with 401/403 before the
	// finalizer is dropped anyway (defaultDeletionGrace when zero).
	DeletionGrace time.Duration

	// ClusterName names the cluster in notifications and keys the commit statuses they set
	// ("converge/<cluster>/<namespace>/<name>", so two clusters deploying one commit keep
	// their own); "" names none, and a commit-status notification then fails.
	ClusterName string

	// WebhookAddr is the address of the push webhook receiver ("" disables it).
	WebhookAddr string

	// CacheDir is where git repositories are cached.
	CacheDir string
	// GitCacheQuota bounds the bytes CacheDir holds (git.FetchOptions.CacheQuota); 0: no
	// limit.
	GitCacheQuota int64
	// OCICacheQuota bounds the bytes of the extracted OCI artifacts kept beside CacheDir
	// (sources.OCICacheDir; oci.FetchOptions.CacheQuota); 0: no limit.
	OCICacheQuota int64
	// ChartCacheQuota bounds the bytes of the charts fetched from HTTP Helm repositories
	// kept beside CacheDir (sources.ChartCacheDir); 0: no limit.
	ChartCacheQuota int64
	// MaxIndexSize bounds a Helm repository's index.yaml (helmrepo.FetchOptions.MaxIndexSize).
	MaxIndexSize int64
	// AllowLocalGit lets Syncs name file:// URLs, local paths and git servers or OCI
	// registries on this machine or its link (see git.FetchOptions.AllowLocal).
	AllowLocalGit bool
	// MaxFetchSize bounds the bytes one git fetch downloads (git.FetchOptions.MaxFetchSize).
	MaxFetchSize int64
	// BuildTimeout bounds one Sync's fetch and render (defaultBuildTimeout when zero).
	BuildTimeout time.Duration
	// FetchTimeout bounds one Sync's git fetch, handshake included, within BuildTimeout
	// (defaultFetchTimeout when zero).
	FetchTimeout time.Duration
	// Limits bound a render (zero fields: the sources package's defaults).
	Limits sources.Limits
	// RenderCacheSize bounds the renders kept for the next reconciles, in bytes of their
	// objects' JSON (0: sources.DefaultRenderCacheBytes).
	RenderCacheSize int64

	// QuickStart, when its GitURL is set, is a Sync the daemon creates and owns at start.
	QuickStart QuickStart

	// test holds what only this package's tests set.
	test testOptions
}

// testOptions are the daemon's settings that only its tests change.
type testOptions struct {
	webhook webhook.Options // zero: webhook.DefaultOptions(); tests shorten it
	// notify configures the notification Dispatcher (zero: notify.DefaultOptions()); tests
	// allow local receivers and shorten the retries.
	notify notify.Options
	// alsoWatch adds namespaces to WatchNamespace's (cross-namespace dependencies
	// without watching every namespace of the shared test cluster).
	alsoWatch []string
	crash     crashPoints
	// skipShardRelease stops a sharded daemon without releasing its Leases, as a SIGKILL
	// would.
	skipShardRelease bool
}

// DefaultOptions are the defaults of `converge run`'s flags.
func DefaultOptions() Options {
	return Options{
		MetricsAddr:     ":8080",
		HealthAddr:      ":8081",
		LeaderElect:     true,
		LeaderNamespace: "converge-system",
		Replica:         defaultReplica(),
		Sharding:        ShardingOff,
		Shards:          defaultShards,
		LeaseDuration:   15 * time.Second,
		RenewDeadline:   10 * time.Second,
		RetryPeriod:     2 * time.Second,
		InstallCRD:      true,
		WatchCache:      true,
		DriftReconcile:  true,
		Concurrency:     4,
		DeletionGrace:   defaultDeletionGrace,
		CacheDir:        filepath.Join(os.TempDir(), "converge-cache"),
		BuildTimeout:    defaultBuildTimeout,
		FetchTimeout:    defaultFetchTimeout,
		GitCacheQuota:   defaultGitCacheQuota,
		OCICacheQuota:   defaultOCICacheQuota,
		ChartCacheQuota: defaultChartCacheQuota,
		MaxIndexSize:    helmrepo.DefaultFetchOptions().MaxIndexSize,
		MaxFetchSize:    git.DefaultMaxFetchSize,
		Limits: sources.Limits{MaxFiles: sources.DefaultMaxFiles, MaxFileSize: sources.DefaultMaxFileSize,
			MaxObjects: sources.DefaultMaxObjects, MaxTotalSize: sources.DefaultMaxTotalSize,
			MaxRenderMemory: sources.DefaultMaxRenderMemory, MaxRenderOutput: sources.DefaultMaxRenderOutput,
			RenderSlots: sources.DefaultRenderSlots},
		RenderCacheSize: sources.DefaultRenderCacheBytes,
		QuickStart:      DefaultQuickStart(),
		test:            testOptions{webhook: webhook.DefaultOptions()},
	}
}

// defaultReplica is $POD_NAME, else the host name, else "converge".
func defaultReplica() string {
	if n := os.Getenv("POD_NAME"); n != "" {
		return n
	}
	if n, err := os.Hostname(); err == nil && n != "" {
		return n
	}
	return "converge"
}

// defaultLeaderTimings fills unset leader-election timings with the flags' defaults
// (controller-runtime's).
func (o *Options) defaultLeaderTimings() {
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&o.LeaseDuration, 15 * time.Second}, {&o.RenewDeadline, 10 * time.Second}, {&o.RetryPeriod, 2 * time.Second}} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
}

// Validate reports an option the daemon cannot run with, naming its flag, so a typo stops
// the daemon at start instead of failing every Sync later.
func (o Options) Validate() error {
	if o.RenderCacheSize < 0 {
		return fmt.Errorf("--render-cache-size %d: must not be negative (0: the default, %d)", o.RenderCacheSize, sources.DefaultRenderCacheBytes)
	}
	if sa := o.DefaultServiceAccount; sa != "" {
		if errs := validation.IsDNS1123Subdomain(sa); len(errs) > 0 {
			return fmt.Errorf("--default-service-account %q: not a service account name: %s", sa, strings.Join(errs, "; "))
		}
	}
	switch o.Sharding {
	case "", ShardingOff:
	case ShardingAuto:
		if o.Shards != 0 && (o.Shards < 1 || o.Shards > maxShards) {
			return fmt.Errorf("--shards %d: must be between 1 and %d", o.Shards, maxShards)
		}
		if o.Replica == "" {
			return errors.New("--replica-name: must not be empty with --sharding=auto (it names the replica's Lease)")
		}
		if o.LeaderNamespace == "" {
			return errors.New("--leader-election-namespace: must not be empty with --sharding=auto (the shard Leases live there)")
		}
		if errs := validation.IsDNS1123Subdomain(o.shardConfig().ReplicaLeaseName()); len(errs) > 0 {
			return fmt.Errorf("--replica-name %q: cannot name the replica's Lease: %s", o.Replica, strings.Join(errs, "; "))
		}
		// A shard is written for until RenewDeadline after its last renew and taken over
		// LeaseDuration after the last renew was seen: the gap must cover a renewal in flight
		// (a request takes up to RetryPeriod) and the next step's (RetryPeriod later).
		t := o
		t.defaultLeaderTimings()
		if t.LeaseDuration < t.RenewDeadline+2*t.RetryPeriod {
			return fmt.Errorf("--leader-election-lease-duration %s: must be at least --leader-election-renew-deadline (%s) + 2 × --leader-election-retry-period (%s) with --sharding=auto",
				t.LeaseDuration, t.RenewDeadline, t.RetryPeriod)
		}
	default:
		return fmt.Errorf("--sharding %q: must be %q or %q", o.Sharding, ShardingOff, ShardingAuto)
	}
	if _, err := labels.Parse(o.WatchLabelSelector); err != nil {
		return fmt.Errorf("--watch-label-selector %q: %w", o.WatchLabelSelector, err)
	}
	return nil
}

// crossNamespaceRefused is whether a dependency or dependent in another namespace is refused:
// NoCrossNamespaceRefs when given explicitly, else on under lockdown (DefaultServiceAccount)
// and off without it (single-tenant, as in Flux).
func (o Options) crossNamespaceRefused() bool {
	if o.NoCrossNamespaceRefsSet || o.NoCrossNamespaceRefs {
		return o.NoCrossNamespaceRefs
	}
	return o.DefaultServiceAccount != ""
}

// leaderElectionID names the leader Lease: one per label selector, so that the daemons of
// different shards lead at the same time.
func (o Options) leaderElectionID() string {
	const id = "converge-leader"
	sel, err := labels.Parse(o.WatchLabelSelector)
	if err != nil || sel.Empty() {
		return id
	}
	sum := sha256.Sum256([]byte(sel.String())) // normalized: the same selector, the same Lease
	return id + "-" + hex.EncodeToString(sum[:])[:10]
}
