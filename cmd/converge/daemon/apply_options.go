package daemon

import (
	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// ApplyOptions are the engine options the daemon applies the Sync s with: `converge diff`
// dry-runs a Sync's source with them, so what it shows is what a reconcile would do.
func ApplyOptions(s *v1alpha1.Sync) engine.ApplyOptions { return applyOptions(s) }
