package sources

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"strings"
)

// HelmOptions render the chart folder at the rendered path template-only, as `helm
// template` does, in a render child (RenderOptions.Helm). Helm itself never runs: no
// release is stored, no hook is run, nothing talks to a cluster. What becomes of each hook
// kind is decided by keepHook.
type HelmOptions struct {
	// Values are merged over the chart's values.yaml (and its subcharts', by their keys).
	Values map[string]any `json:"values,omitempty"`
	// ReleaseName is .Release.Name; required.
	ReleaseName string `json:"releaseName"`
	// Namespace is .Release.Namespace; required.
	Namespace string `json:"namespace"`
	// IncludeCRDs renders the CRDs of the chart's and its subcharts' crds/ folders, first.
	IncludeCRDs bool `json:"includeCRDs,omitempty"`
	// KubeVersion is .Capabilities.KubeVersion ("v1.36.0"); empty: Helm's default.
	KubeVersion string `json:"kubeVersion,omitempty"`
	// APIVersions are added to .Capabilities.APIVersions ("group/version" or
	// "group/version/Kind").
	APIVersions []string `json:"apiVersions,omitempty"`
	// PostRenderers change the chart's objects after the render, in order, in the render
	// child (helm_postrender.go). Their errors name them as the Sync's fields
	// (spec.source.helm.postRenderers[i]...).
	PostRenderers []PostRenderer `json:"postRenderers,omitempty"`
}

// chartFile is the file that makes a folder a Helm chart.
const chartFile = "Chart.yaml"

// chartUnit returns the one unit rendering the chart folder rel (a slash path in r), or
// the packaged chart rel (a .tgz file, as `helm package` writes it), or an error naming
// what is missing.
func chartUnit(r *os.Root, rel string, h *HelmOptions) ([]unit, error) {
	p := path.Join(rel, chartFile)
	if isArchive(rel) {
		p = rel
	}
	info, err := r.Stat(p)
	switch {
	case err == nil && p == rel && info.Mode().IsRegular() && (h.ReleaseName == "" || h.Namespace == ""):
		return nil, &InputError{File: p, Err: fmt.Errorf("a Helm render needs a release name and namespace")}
	case err == nil && p == rel && info.Mode().IsRegular():
		return []unit{{rel: rel, chart: h}}, nil
	case escapes(err):
		return nil, symlinkEscape(p)
	case err != nil || !info.Mode().IsRegular():
		return nil, &InputError{File: rel, Err: fmt.Errorf("not a Helm chart: no %s in the folder", chartFile)}
	case h.ReleaseName == "" || h.Namespace == "":
		return nil, &InputError{File: p, Err: fmt.Errorf("a Helm render needs a release name and namespace")}
	}
	return []unit{{rel: rel, chart: h}}, nil
}

// isArchive reports whether the slash path rel names a packaged chart.
func isArchive(rel string) bool {
	return strings.HasSuffix(rel, ".tgz") || strings.HasSuffix(rel, ".tar.gz")
}

// helmKey is the part of the render cache key a chart render adds: its options as JSON
// (maps marshal sorted, so equal values give equal keys).
func helmKey(h *HelmOptions) string {
	if h == nil {
		return ""
	}
	js, err := json.Marshal(h)
	if err != nil {
		return fmt.Sprintf("unkeyable:%p", h) // never equal to another render's key
	}
	// A digest, not the values themselves: the render cache's keys are not counted in
	// --render-cache-size, and a Sync's values may be large.
	sum := sha256.Sum256(js)
	return hex.EncodeToString(sum[:])
}

// buildChart renders the chart folder (or packaged chart) u.rel in a render child, always:
// a template can loop or allocate without bound, and only a child can be stopped and held
// to a memory limit. The child reads the chart only (nothing else of the source).
func buildChart(ctx context.Context, root string, u unit, opts RenderOptions, b *budget) ([]decoded, error) {
	file := path.Join(u.rel, chartFile)
	if isArchive(u.rel) {
		file = u.rel
	}
	req := childRequest{Root: root, Unit: u.rel, Helm: u.chart, Limits: b.limits, Ignored: opts.Ignored, Rendered: b.rel, Read: b.bytes.Load()}
	return runChild(ctx, file, "helm template", req, opts, b)
}
