package engine

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/converge-dev/converge/inventory"
)

// FieldManager is the server-side apply field manager of every object Converge applies.
const FieldManager = "converge"

// OwnerAnnotation is set on every applied object; its value is the inventory ID of the set
// that owns it. Prune and Delete only touch objects carrying it with their own ID.
const OwnerAnnotation = inventory.OwnerAnnotation

// Annotations users set on objects to change how the engine treats them.
const (
	// PruneAnnotation set to PruneDisabled keeps the object when it leaves the set; it is
	// then dropped from the inventory.
	PruneAnnotation = "converge.dev/prune"
	PruneDisabled   = "disabled"
	// ReconcileAnnotation set to ReconcileDisabled makes the engine skip the object's apply.
	ReconcileAnnotation = "converge.dev/reconcile"
	ReconcileDisabled   = "disabled"
	// ForceAnnotation set to ForceEnabled lets the engine recreate the object when an
	// immutable field changed, as ApplyOptions.Force does for every object.
	ForceAnnotation = "converge.dev/force"
	ForceEnabled    = "enabled"
)

// Set is a desired set of objects and where its inventory lives. Apply does not modify
// the objects, but shares their contents while it runs: they must not be modified until it
// returns.
type Set struct {
	Inventory inventory.Ref
	Objects   []*unstructured.Unstructured
	// Origins optionally says where each object was rendered from ("apps/web.yaml:3"), in
	// the order of Objects; messages about an object start with it.
	Origins []string
	// Key, when not "", names the set and the options of its runs: the caller gives two
	// runs one Key only when their Objects and ApplyOptions are equal. A run under a Key
	// that changed nothing lets Quiet answer the next run under it (quiet.go).
	Key string
	// Own, when not nil (the length of Objects), marks the objects the caller hands over:
	// nothing else refers to them or to the maps of their metadata, and the caller does not
	// read them once Apply is called. Apply sets their metadata in place (the namespace, the
	// owner annotation, the watch cache's label; server fields removed) instead of copying
	// it: at 10,000 objects the copies are about 10 MB held through the run. The other
	// objects, and all of them when Own is nil, are left as they are.
	Own []bool
	// Docs, when not nil, are the objects as JSON, one per object, and Objects is nil: the
	// engine decodes each when it prepares it and again when it applies it, and drops it
	// once done, so a run never holds the whole set decoded (the benchmark's 10,000
	// objects: 22 MB of maps against 2.6 MB of JSON). Each decode is the engine's own, as Own says of Objects.
	// Docs are read, never modified.
	Docs [][]byte
}

// size is the number of objects of the set.
func (s Set) size() int {
	if s.Docs != nil {
		return len(s.Docs)
	}
	return len(s.Objects)
}

// Hooks are crash points for tests. A hook that returns an error aborts the run at once,
// as a crash would: no further apply, prune or inventory write. Nil hooks are skipped.
type Hooks struct {
	// AfterWriteAhead runs after the write-ahead inventory write.
	AfterWriteAhead func() error
	// AfterApply runs after the k-th successful object apply (k counts from 1).
	AfterApply func(k int, id string) error
	// AfterPrune runs after the j-th successful delete of Apply's prune or of Delete (j
	// counts from 1).
	AfterPrune func(j int, id string) error
	// AfterAbandon runs after Abandon removed the owner annotation of the j-th object (j
	// counts from 1).
	AfterAbandon func(j int, id string) error
	// Migrate are the crash points of Migrate, used when its options name none.
	Migrate inventory.MigrateHooks
}

// Options configures an Engine.
type Options struct {
	// Hooks are test-only crash points.
	Hooks Hooks
	// PollInterval is the kstatus poll period while waiting for readiness and the period of
	// the CRD Established wait. Zero means 2 s.
	PollInterval time.Duration
	// Watch keeps a watch cache of the managed kinds (managedFields stripped) and remembers
	// what each object looked like after it was applied, so that a reconcile of an unchanged
	// set sends no request per object, readiness is read from the cache, and a prune needs
	// one DELETE per object. The cache runs while Run runs; without Run, reads fall back to
	// the API server. Meant for long-lived engines (the daemon); a one-shot CLI run gains
	// nothing from it.
	Watch bool
	// Changed, with Watch, hears of out-of-band changes: it is called with the owner
	// annotation's value (an inventory ID) when an object carrying OwnerAnnotation is
	// deleted, or updated in its spec or metadata (a new generation, other labels or
	// annotations; any update of a kind without generations) to a resourceVersion this
	// engine did not write. Status-only updates are not reported. The engine's own writes
	// may occasionally be reported too (the watch event can beat the apply's response), so
	// a caller should reconcile, not alarm. It is called from the watch cache's goroutines
	// and must not block. The kinds reported are those the engine has read through the
	// cache, that is, every kind it applied since Run started.
	Changed func(inventoryID string)
	// Scope, with Watch, narrows the engine's watch cache to one share of the managed
	// objects: every object the engine applies carries the label Scope.Key=Scope.Value, and
	// its informers list and watch only objects with that label. Daemon replicas that split
	// the Syncs among themselves each cache only their share, so a replica's memory falls with
	// it. An object the cache does not show (applied before it carried the label, or under
	// another scope) is read from the API server, as any cache miss is, and its next apply
	// labels it. The zero Scope caches every object of the managed kinds.
	Scope Label
	// Heads, with Watch, is a watch of the inventory ConfigMaps' versions (inventory.Heads),
	// shared by every engine of a process: a run whose inventory the engine read before and
	// whose ConfigMap the watch shows unchanged starts from that read instead of reading it
	// again, so a no-op reconcile sends no request at all (heads.go). Nil reads the
	// inventory at every run.
	Heads HeadVersions
	// IgnoredFields, with Watch, is the registry of ignore rules the watch caches'
	// fingerprints are blind to (fingerprint.go), shared by every engine of a process, so
	// that the run of any of them, an impersonated engine without a cache among them, sets
	// the rules its inventory's objects are fingerprinted with wherever they are cached.
	// Nil: an engine with a watch cache keeps a registry of its own.
	IgnoredFields *IgnoredFields
}

// Label is one label, key=value.
type Label struct{ Key, Value string }

// Engine applies sets of objects to one cluster. It is safe for concurrent use by
// different sets; two concurrent runs for the same inventory rely on the inventory's
// optimistic concurrency.
type Engine struct {
	client client.Client
	// cfg and httpClient are what the watch cache is built from (Scoped shares them).
	cfg        *rest.Config
	httpClient *http.Client
	// meta sends the real applies: the server answers with the object's metadata only
	// (protobuf), which is all the engine keeps of an apply's answer.
	meta   *metadataClients
	mapper meta.RESTMapper
	store  *inventory.Store
	opts   Options
	cache  *watchCache // nil without Watch
	memo   *memo       // nil without Watch
	heads  *heads      // nil without Watch and Heads
	quiet  *quietRuns  // nil without Watch and Heads (quiet.go)
	// migrations is what Migrate remembers of the inventories it took over from their
	// legacy IDs (legacy_migrate.go).
	migrations migrations
}

// New builds an Engine for cfg: an uncached controller-runtime client whose RESTMapper
// re-discovers on "no matches for kind" (so CRDs applied by the engine become usable),
// the metadata client of the applies, and the inventory store.
func New(cfg *rest.Config, opts Options) (*Engine, error) {
	if opts.PollInterval <= 0 {
		opts.PollInterval = 2 * time.Second
	}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("engine: http client: %w", err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("engine: rest mapper: %w", err)
	}
	c, err := client.New(cfg, client.Options{HTTPClient: httpClient, Mapper: mapper})
	if err != nil {
		return nil, fmt.Errorf("engine: client: %w", err)
	}
	e := &Engine{client: c, cfg: cfg, httpClient: httpClient,
		meta: &metadataClients{cfg: cfg, httpClient: httpClient}, mapper: mapper, store: inventory.NewStore(c), opts: opts}
	if err := e.startCache(); err != nil {
		return nil, err
	}
	return e, nil
}

// Scoped returns an engine that shares e's connections, RESTMapper and inventory store but
// has a watch cache of its own, narrowed to scope (Options.Scope), and its own memo: one
// engine per share of the Syncs, each dropped (its Run's context ended) when the share moves
// elsewhere, without a connection or a discovery of its own.
func (e *Engine) Scoped(scope Label) (*Engine, error) {
	opts := e.opts
	opts.Watch, opts.Scope = true, scope
	s := &Engine{client: e.client, cfg: e.cfg, httpClient: e.httpClient, meta: e.meta, mapper: e.mapper, store: e.store, opts: opts}
	if err := s.startCache(); err != nil {
		return nil, err
	}
	return s, nil
}

// startCache builds the watch cache and the memo when e.opts asks for them.
func (e *Engine) startCache() error {
	if !e.opts.Watch {
		return nil
	}
	var err error
	e.memo = newMemo()
	if e.opts.Heads != nil {
		e.heads, e.quiet = newHeads(e.opts.Heads), newQuietRuns()
	}
	ignored := e.opts.IgnoredFields
	if ignored == nil {
		ignored = NewIgnoredFields()
	}
	e.cache, err = newWatchCache(e.cfg, e.httpClient, e.client, e.memo, e.quiet, ignored, e.opts.Changed, e.opts.Scope)
	return err
}

// Run runs the watch cache of an engine built with Options.Watch until ctx ends. Without
// Watch it returns at once.
func (e *Engine) Run(ctx context.Context) error {
	if e.cache == nil {
		return nil
	}
	return e.cache.cache.Start(ctx)
}

// Inventory returns the stored inventory of ref, read from the API server.
func (e *Engine) Inventory(ctx context.Context, ref inventory.Ref) (*inventory.Inventory, error) {
	return e.store.Get(ctx, ref)
}
