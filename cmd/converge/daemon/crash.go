package daemon

import (
	"fmt"

	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// crashPoints are the daemon's test-only crash points (docs/reliability.md "Crash points"),
// set only by this package's tests, through the unexported Options.test.crash. A hook that returns an error ends the
// reconcile at once, as a crash would: nothing further is applied or written. A test makes
// it a real crash by also stopping the daemon, then starts a new one on a cold cache. Nil
// hooks are skipped.
type crashPoints struct {
	// AfterRender runs once the source is rendered, before the engine is called.
	AfterRender func(*v1alpha1.Sync) error
	// BeforeStatusWrite runs after the apply, before the status write.
	BeforeStatusWrite func(*v1alpha1.Sync) error
	// BeforeFinalizerRemoval runs after the deletion policy's deletes were confirmed, before
	// the finalizer is dropped.
	BeforeFinalizerRemoval func(*v1alpha1.Sync) error
	// Engine are the engine's crash points (after the write-ahead, the k-th apply, the j-th
	// prune).
	Engine engine.Hooks
}

// call runs hook h for s.
func (crashPoints) call(h func(*v1alpha1.Sync) error, s *v1alpha1.Sync) error {
	if h == nil {
		return nil
	}
	if err := h(s); err != nil {
		return fmt.Errorf("crash point: %w", err)
	}
	return nil
}
