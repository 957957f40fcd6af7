package main

import (
	"fmt"
	"sync"

	"k8s.io/client-go/rest"

	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/status"
)

// engineSet keeps one engine per identity: the daemon's own, and one per impersonated
// service account (spec.serviceAccountName), so tenants apply with their own RBAC.
type engineSet struct {
	cfg  *rest.Config
	opts engine.Options
	mu   sync.Mutex
	byID map[string]*engine.Engine
}

func newEngineSet(cfg *rest.Config, opts engine.Options) *engineSet {
	return &engineSet{cfg: cfg, opts: opts, byID: map[string]*engine.Engine{}}
}

// forSync returns the engine that acts for s.
func (e *engineSet) forSync(s *status.Sync) (*engine.Engine, error) {
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
	if user != "" {
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	}
	eng, err := engine.New(cfg, e.opts)
	if err != nil {
		return nil, err
	}
	e.byID[user] = eng
	return eng, nil
}
