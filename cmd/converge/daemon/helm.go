package daemon

import (
	"encoding/json"
	"fmt"

	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// helmOptions returns how spec.source.helm renders the Sync's chart, or nil when it names
// none: release name the Sync's, namespace releaseNamespace, CRDs included unless
// includeCRDs is false. A values document that is not a JSON object is terminal.
func helmOptions(s *v1alpha1.Sync) (*sources.HelmOptions, error) {
	h := s.Spec.Source.Helm
	if h == nil {
		return nil, nil
	}
	opts := &sources.HelmOptions{ReleaseName: h.ReleaseName, Namespace: releaseNamespace(s), IncludeCRDs: true,
		KubeVersion: h.KubeVersion, APIVersions: h.APIVersions}
	if opts.ReleaseName == "" {
		opts.ReleaseName = s.Name
	}
	if h.IncludeCRDs != nil {
		opts.IncludeCRDs = *h.IncludeCRDs
	}
	if h.Values != nil && len(h.Values.Raw) > 0 {
		if err := json.Unmarshal(h.Values.Raw, &opts.Values); err != nil {
			return nil, fmt.Errorf("spec.source.helm.values: %w", err)
		}
	}
	return opts, nil
}

// releaseNamespace is .Release.Namespace of the Sync's chart: spec.source.helm's
// releaseNamespace, else spec.targetNamespace, else the Sync's own namespace.
func releaseNamespace(s *v1alpha1.Sync) string {
	if h := s.Spec.Source.Helm; h != nil && h.ReleaseNamespace != "" {
		return h.ReleaseNamespace
	}
	if s.Spec.TargetNamespace != "" {
		return s.Spec.TargetNamespace
	}
	return s.Namespace
}
