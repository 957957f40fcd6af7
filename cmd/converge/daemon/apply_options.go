package daemon

import (
	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/sources/pipeline"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// ApplyOptions are the engine options the daemon applies the Sync s with: `converge diff`
// dry-runs a Sync's source with them, so what it shows is what a reconcile would do.
func ApplyOptions(s *v1alpha1.Sync) engine.ApplyOptions { return applyOptions(s) }

// BuildFields are the Sync s's inline build fields as the daemon renders them: the overlay
// of its kustomize build (spec.patches, images, namePrefix, nameSuffix, components) and the
// labels and annotations set on every object last (spec.commonMetadata), each nil when
// unset. `converge diff`, `tree` and `trace` render a Sync with them, so they show the
// daemon's objects.
func BuildFields(s *v1alpha1.Sync) (*sources.Overlay, *pipeline.Metadata) {
	return overlay(s), commonMetadata(s)
}
