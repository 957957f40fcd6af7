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
// service account (spec.serviceAccountName), so tenants apply with their own RBAC.
//
// With watch set, the daemon's own engine keeps a watch cache of the kinds it manages (a
// no-op reconcile then sends no request per object), running until ctx ends. Impersonated
// engines read from the API server: a tenant's RBAC rarely allows cluster-wide watches.
type engineSet struct {
	ctx   context.Context
	cfg   *rest.Config
	opts  engine.Options
	watch bool
	mu    sync.Mutex
	byID  map[string]*engine.Engine
}

func newEngineSet(ctx context.Context, cfg *rest.Config, opts engine.Options, watch bool) *engineSet {
	return &engineSet{ctx: ctx, cfg: cfg, opts: opts, watch: watch, byID: map[string]*engine.Engine{}}
}

// forSync returns the engine that acts for s.
func (e *engineSet) forSync(s *v1alpha1.Sync) (*engine.Engine, error) {
	user := ""
	if sa := s.Spec.ServiceAccountName; sa != "" {
		user = fmt.Sprintf("system:serviceaccount:%s:%s", s.Namespace, sa)
	}
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
