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
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/sources/varsubst"
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
	opts.PostRenderers = postRenderers(h.PostRenderers)
	return opts, nil
}

// helm readies src to render spec.source.helm, if s names one: its options
// (helmOptions), its values read from valuesFrom and merged under its own (as the Sync's
// identity: one GET per entry, none without valuesFrom), its chart folder. Values read from
// Secrets are redacted from what is written about s from now on, and returned to be
// redacted after the substitution too. A failure is terminal when the Sync's own spec is
// at fault; reading valuesFrom is not: fixing a ConfigMap makes no new revision.
func (r *reconciler) helm(ctx context.Context, s *v1alpha1.Sync, src *sources.Source) (secretValues []string, terminal bool, err error) {
	if src.Helm, err = helmOptions(ctx, s, r.kubeVersion); err != nil || src.Helm == nil {
		return nil, true, err
	}
	h := s.Spec.Source.Helm
	if h.Chart != "" && s.Spec.Source.HelmRepository == nil {
		src.Path = h.Chart // a chart of a repository is its name there, not a path
	}
	if len(h.ValuesFrom) == 0 {
		return nil, false, nil
	}
	base, secretValues, read, err := r.valuesFrom(ctx, s)
	if len(secretValues) > 0 {
		r.setRedactor(client.ObjectKeyFromObject(s), varsubst.NewRedactor(secretValues))
	}
	if err != nil {
		return secretValues, false, err
	}
	if h.Values != nil && read+len(h.Values.Raw) > maxValuesBytes {
		return secretValues, false, fmt.Errorf("spec.source.helm: the Helm values (valuesFrom and values) pass %d MiB, the most one Sync may have", maxValuesBytes>>20)
	}
	src.Helm.Values = sources.MergeValues(base, src.Helm.Values)
	return secretValues, false, nil
}

// postRenderers are spec.source.helm.postRenderers as the render child runs them.
func postRenderers(in []v1alpha1.PostRenderer) []sources.PostRenderer {
	var out []sources.PostRenderer
	for _, pr := range in {
		k := pr.Kustomize
		if k == nil {
			out = append(out, sources.PostRenderer{}) // kept: errors name the others by index
			continue
		}
		sk := &sources.KustomizePostRenderer{}
		for _, p := range k.Patches {
			sp := sources.Patch{Patch: p.Patch}
			if t := p.Target; t != nil {
				sp.Target = &sources.PatchTarget{Group: t.Group, Version: t.Version, Kind: t.Kind, Name: t.Name,
					Namespace: t.Namespace, LabelSelector: t.LabelSelector, AnnotationSelector: t.AnnotationSelector}
			}
			sk.Patches = append(sk.Patches, sp)
		}
		for _, im := range k.Images {
			sk.Images = append(sk.Images, sources.Image{Name: im.Name, NewName: im.NewName, NewTag: im.NewTag, Digest: im.Digest})
		}
		out = append(out, sources.PostRenderer{Kustomize: sk})
	}
	return out
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
