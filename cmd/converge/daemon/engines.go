package daemon

import (
	"context"
	"fmt"
	"sync"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"

	"github.com/converge-dev/converge/cmd/converge/daemon/shard"
	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/inventory"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// engineSet keeps what acts for each identity: the daemon's own, and one per impersonated
// service account (spec.serviceAccountName, else defaultSA), so tenants apply, delete and
// read their git Secrets with their own RBAC.
//
// With watch set, the daemon's own engine keeps a watch cache of the kinds it manages (a
// no-op reconcile then sends no request per object), running until ctx ends. Impersonated
// engines read from the API server: a tenant's RBAC rarely allows cluster-wide watches.
//
// An impersonated identity is kept while a Sync acts as it: forget drops it with the last
// such Sync, so the set does not grow with every service account name ever written.
type engineSet struct {
	ctx   context.Context
	cfg   *rest.Config
	opts  engine.Options
	watch bool
	// defaultSA is the service account (in the Sync's namespace) a Sync without
	// spec.serviceAccountName impersonates; "" lets such a Sync act as the daemon
	// (--default-service-account).
	defaultSA string
	// states records the user each Sync last acted as (syncState.user); forgetting a Sync
	// releases its hold on that user's actor.
	states *syncStates
	mu     sync.Mutex
	byUser map[string]*actor
	// shards, with sharding on and watch set, holds the daemon's own engines of the shards
	// this replica holds (shardEngines); the daemon's own actor then keeps no watch cache.
	shards *shardEngines
}

// actor is what acts for one user: the engine of its applies and deletions, and the client
// of the Secrets (and substituteFrom ConfigMaps) its Syncs name, both from the same rest config.
type actor struct {
	eng     *engine.Engine
	secrets corev1client.CoreV1Interface
	syncs   int // how many Syncs act as this user
}

func newEngineSet(ctx context.Context, cfg *rest.Config, opts engine.Options, watch bool, defaultSA string, states *syncStates) *engineSet {
	if opts.IgnoredFields == nil {
		// One registry for every engine: a Sync acting as a service account (an engine
		// without a cache) sets and clears its rules where its objects are cached.
		opts.IgnoredFields = engine.NewIgnoredFields()
	}
	e := &engineSet{ctx: ctx, cfg: cfg, opts: opts, watch: watch, defaultSA: defaultSA, states: states,
		byUser: map[string]*actor{}}
	states.onForget(func(_ types.NamespacedName, old syncState) {
		if old.acting {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.release(old.user)
		}
	})
	return e
}

// user is the user s acts as: its spec.serviceAccountName, else the default service
// account, in s's namespace; "" is the daemon's own identity. Every call made for s (apply,
// prune, readiness reads, deletion, the read of its git Secret) goes through the actor of
// this user, so one rule decides what a Sync can reach.
func (e *engineSet) user(s *v1alpha1.Sync) string { return actsAs(s, e.defaultSA) }

// actsAs is the user s acts as when the default service account is defaultSA ("" is the
// daemon's own identity): engineSet.user, for what is not an engine (the webhook).
func actsAs(s *v1alpha1.Sync, defaultSA string) string {
	sa := s.Spec.ServiceAccountName
	if sa == "" {
		sa = defaultSA
	}
	if sa == "" {
		return ""
	}
	return fmt.Sprintf("system:serviceaccount:%s:%s", s.Namespace, sa)
}

// identity names the user s acts as, for messages.
func (e *engineSet) identity(s *v1alpha1.Sync) string {
	if u := e.user(s); u != "" {
		return u
	}
	return "the daemon"
}

// forSync returns the engine that acts for s: with sharding on, a Sync acting as the daemon
// gets its shard's engine.
func (e *engineSet) forSync(s *v1alpha1.Sync) (*engine.Engine, error) {
	a, err := e.actorFor(s)
	if err != nil {
		return nil, err
	}
	if e.shards != nil && e.user(s) == "" {
		return e.shards.forShard(e.ctx, a.eng, e.shards.cfg.Of(s.UID))
	}
	return a.eng, nil
}

// shardEngines are the daemon's own engines of the shards a replica holds, one per shard:
// each applies its Syncs' objects with the shard's label (shard.Config.Label) and caches only
// the objects carrying it, so a replica caches the managed objects of its own share, not the
// cluster's. A shard's engine is built on the first reconcile of the shard's holding and
// dropped, with its cache and memo, once the shard is released or lost (drop). The next
// holding starts afresh, as a restart does: its first reconciles read what they apply from
// the API server (the survey), since another replica may have written it meanwhile.
type shardEngines struct {
	cfg  shard.Config
	mu   sync.Mutex
	held map[int]*shardEngine
}

type shardEngine struct {
	eng  *engine.Engine
	stop context.CancelFunc
}

func newShardEngines(cfg shard.Config) *shardEngines {
	return &shardEngines{cfg: cfg, held: map[int]*shardEngine{}}
}

// forShard returns shard i's engine, derived from base (engine.Scoped) and its cache run
// under ctx on first use.
func (s *shardEngines) forShard(ctx context.Context, base *engine.Engine, i int) (*engine.Engine, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if se, ok := s.held[i]; ok {
		return se.eng, nil
	}
	eng, err := base.Scoped(s.cfg.Label(i))
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(ctx)
	go func() {
		if err := eng.Run(ctx); err != nil {
			logr.FromContextOrDiscard(ctx).Error(err, "watch cache of a shard stopped", "shard", i)
		}
	}()
	s.held[i] = &shardEngine{eng: eng, stop: stop}
	return eng, nil
}

// drop stops and forgets shard i's engine (shard.Hooks.Drained): the shard's reconciles
// have ended (the coordinator drains them first), and none starts again before the shard
// is acquired anew.
func (s *shardEngines) drop(i int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if se, ok := s.held[i]; ok {
		se.stop()
		delete(s.held, i)
	}
}

// dropShard drops shard i's engine (shardEngines.drop), when sharding is on.
func (e *engineSet) dropShard(i int) {
	if e.shards != nil {
		e.shards.drop(i)
	}
}

// secret reads Secret name of s's namespace from the API server as the user s acts as: a
// tenant who may create Syncs but not read Secrets cannot have the daemon read one for them
// (and send its credentials to a git host of their choosing).
func (e *engineSet) secret(ctx context.Context, s *v1alpha1.Sync, name string) (*corev1.Secret, error) {
	c, err := e.secretsOf(s)
	if err != nil {
		return nil, err
	}
	return c.Secrets(s.Namespace).Get(ctx, name, metav1.GetOptions{})
}

// secretsOf returns the client that reads Secrets as s's identity.
func (e *engineSet) secretsOf(s *v1alpha1.Sync) (corev1client.CoreV1Interface, error) {
	a, err := e.actorFor(s)
	if err != nil {
		return nil, err
	}
	return a.secrets, nil
}

// actorFor returns the actor of s's user, building it on first use, and records that s acts
// as that user (releasing the user s acted as before, if its serviceAccountName changed).
func (e *engineSet) actorFor(s *v1alpha1.Sync) (*actor, error) {
	user := e.user(s)
	key := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
	e.mu.Lock()
	defer e.mu.Unlock()
	a, ok := e.byUser[user]
	if !ok {
		var err error
		if a, err = e.newActor(user); err != nil {
			return nil, err
		}
		e.byUser[user] = a
	}
	var old string
	var acted bool
	e.states.with(key, func(st *syncState) {
		old, acted = st.user, st.acting
		st.user, st.acting = user, true
	})
	if !acted || old != user {
		if acted {
			e.release(old)
		}
		a.syncs++
	}
	return a, nil
}

// release drops one Sync's hold on user; e.mu is held. The actor of an impersonated user is
// dropped when no other Sync acts as it (a reconcile still holding the dropped engine finishes
// with it; impersonated engines run nothing in the background). The daemon's own actor is
// kept: its watch cache runs until the daemon stops.
func (e *engineSet) release(user string) {
	a := e.byUser[user]
	if a == nil {
		return
	}
	if a.syncs--; a.syncs <= 0 && user != "" {
		delete(e.byUser, user)
	}
}

// newActor builds the engine and the Secrets client of user ("" is the daemon) from one
// rest config, impersonating user when there is one; e.mu is held.
func (e *engineSet) newActor(user string) (*actor, error) {
	cfg := rest.CopyConfig(e.cfg)
	opts := e.opts
	var heads *inventory.Heads // the daemon's, run once its engine is built
	if user != "" {
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	} else {
		opts.Watch = e.watch && e.shards == nil // sharded: each shard's engine caches its share
		if e.watch {
			// One watch of the inventory heads serves the daemon's own engines, the shards'
			// included: a no-op reconcile then reads no inventory (engine.Options.Heads).
			var err error
			if heads, err = inventory.NewHeads(cfg); err != nil {
				return nil, err
			}
			opts.Heads = heads
		}
	}
	secrets, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("secrets client: %w", err)
	}
	eng, err := engine.New(cfg, opts)
	if err != nil {
		return nil, err
	}
	if heads != nil {
		go heads.Run(e.ctx)
	}
	if opts.Watch {
		go func() {
			if err := eng.Run(e.ctx); err != nil {
				logr.FromContextOrDiscard(e.ctx).Error(err, "watch cache stopped")
			}
		}()
	}
	return &actor{eng: eng, secrets: secrets}, nil
}
