package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// helmOptions returns how spec.source.helm renders the Sync's chart, or nil when it names
// none: release name the Sync's, namespace releaseNamespace, CRDs included unless
// includeCRDs is false, kubeVersion the cluster's (kube) unless set. A values document that
// is not a JSON object is terminal.
func helmOptions(ctx context.Context, s *v1alpha1.Sync, kube *clusterVersion) (*sources.HelmOptions, error) {
	h := s.Spec.Source.Helm
	if h == nil {
		return nil, nil
	}
	opts := &sources.HelmOptions{ReleaseName: h.ReleaseName, Namespace: releaseNamespace(s), IncludeCRDs: true,
		KubeVersion: h.KubeVersion, APIVersions: h.APIVersions}
	if opts.KubeVersion == "" {
		opts.KubeVersion = kube.get(ctx)
	}
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

// clusterVersion is the API server's version, asked once, on the first render of a chart
// that sets no kubeVersion, as Argo CD gives its charts: Helm's own default (v1.20.0)
// would have charts pick API versions a current cluster no longer serves (policy/v1beta1,
// batch/v1beta1 CronJob). A daemon without charts never asks. Read with the daemon's own
// identity (/version is public to any authenticated user); a failure is asked again next
// time, and the chart renders with Helm's default meanwhile.
type clusterVersion struct {
	cfg     *rest.Config
	mu      sync.Mutex
	version string
}

// get returns the API server's git version ("v1.36.3"), or "" when it cannot be read.
func (v *clusterVersion) get(ctx context.Context) string {
	if v == nil || v.cfg == nil {
		return ""
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.version != "" {
		return v.version
	}
	cfg := rest.CopyConfig(v.cfg)
	cfg.Timeout = 10 * time.Second
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err == nil {
		var info *version.Info
		if info, err = dc.ServerVersion(); err == nil {
			v.version = info.GitVersion
		}
	}
	if err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "reading the API server's version for Helm's .Capabilities.KubeVersion")
	}
	return v.version
}
