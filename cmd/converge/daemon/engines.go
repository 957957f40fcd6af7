package daemon

import (
	"context"
	"fmt"
	"sync"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"

	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// engineSet keeps one engine per identity: the daemon's own, and one per impersonated
// service account (spec.serviceAccountName, else defaultSA), so tenants apply with their own
// RBAC.
//
// With watch set, the daemon's own engine keeps a watch cache of the kinds it manages (a
// no-op reconcile then sends no request per object), running until ctx ends. Impersonated
// engines read from the API server: a tenant's RBAC rarely allows cluster-wide watches.
type engineSet struct {
	ctx   context.Context
	cfg   *rest.Config
	opts  engine.Options
	watch bool
	// defaultSA is the service account (in the Sync's namespace) a Sync without
	// spec.serviceAccountName impersonates; "" lets such a Sync act as the daemon
	// (--default-service-account).
	defaultSA string
	mu        sync.Mutex
	byID      map[string]*engine.Engine
}

func newEngineSet(ctx context.Context, cfg *rest.Config, opts engine.Options, watch bool, defaultSA string) *engineSet {
	return &engineSet{ctx: ctx, cfg: cfg, opts: opts, watch: watch, defaultSA: defaultSA, byID: map[string]*engine.Engine{}}
}

// user is the user s acts as: its spec.serviceAccountName, else the default service
// account, in s's namespace; "" is the daemon's own identity. Every call made for s (apply,
// prune, readiness reads, deletion) goes through the engine of this user, so one rule
// decides what a Sync can reach.
func (e *engineSet) user(s *v1alpha1.Sync) string {
	sa := s.Spec.ServiceAccountName
	if sa == "" {
		sa = e.defaultSA
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

// forSync returns the engine that acts for s.
func (e *engineSet) forSync(s *v1alpha1.Sync) (*engine.Engine, error) {
	user := e.user(s)
	e.mu.Lock()
	defer e.mu.Unlock()
	if eng, ok := e.byID[user]; ok {
		return eng, nil
	}
	cfg := rest.CopyConfig(e.cfg)
	opts := e.opts
	if user != "" {
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	} else {
		opts.Watch = e.watch
	}
	eng, err := engine.New(cfg, opts)
	if err != nil {
		return nil, err
	}
	if opts.Watch {
		go func() {
			if err := eng.Run(e.ctx); err != nil {
				logr.FromContextOrDiscard(e.ctx).Error(err, "watch cache stopped")
			}
		}()
	}
	e.byID[user] = eng
	return eng, nil
}
