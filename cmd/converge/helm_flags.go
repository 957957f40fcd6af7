package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"helm.sh/helm/v3/pkg/strvals"
	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/sources"
)

// helmFlags say how to render a Helm chart folder. A local PATH holding Chart.yaml and no
// kustomization is rendered as a chart without asking; --helm asks for it (with --git-url,
// whose content is not known before the fetch), and so does any of the values flags.
type helmFlags struct {
	helm        bool
	values      []string
	set         []string
	releaseName string
	// namespace is the release namespace: build's --namespace, apply's -n.
	namespace   string
	includeCRDs bool
	kubeVersion string
	apiVersions []string
	// clusterVersion, when set (apply), gives the cluster's version for a chart rendered
	// without --kube-version, as the daemon does; "" when it cannot be read.
	clusterVersion func() string
}

func (h *helmFlags) addFlags(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.BoolVar(&h.helm, "helm", false, "render PATH (or --path) as a Helm chart folder (the default for a local folder with Chart.yaml and no kustomization)")
	fl.StringArrayVarP(&h.values, "values", "f", nil, "Helm values file merged over the chart's values.yaml (repeatable, later wins)")
	fl.StringArrayVar(&h.set, "set", nil, "Helm value key=value over the values files, as helm --set (repeatable)")
	fl.StringVar(&h.releaseName, "release-name", "", "Helm .Release.Name (default: the chart's name in its repository, else the chart folder's name)")
	fl.BoolVar(&h.includeCRDs, "include-crds", true, "render the CRDs of a chart's crds/ folders")
	fl.StringVar(&h.kubeVersion, "kube-version", "", "Helm .Capabilities.KubeVersion (default: apply: the cluster's; build: Helm's, v1.20.0)")
	fl.StringArrayVar(&h.apiVersions, "api-versions", nil, "Helm .Capabilities.APIVersions entry, group/version or group/version/Kind (repeatable)")
}

// asked reports whether a flag asks for a chart render.
func (h *helmFlags) asked() bool {
	return h.helm || len(h.values) > 0 || len(h.set) > 0 || h.releaseName != ""
}

// options returns how to render src as a chart, or nil when src is not one.
func (h *helmFlags) options(src sources.Source) (*sources.HelmOptions, error) {
	chart := chartName(src)
	if chart == "" && !h.asked() && (src.Git.URL != "" || !isChartFolder(filepath.Join(src.Dir, filepath.FromSlash(src.Path)))) {
		return nil, nil
	}
	opts := &sources.HelmOptions{ReleaseName: h.releaseName, Namespace: h.namespace, IncludeCRDs: h.includeCRDs,
		KubeVersion: h.kubeVersion, APIVersions: h.apiVersions, Values: map[string]any{}}
	if opts.ReleaseName == "" {
		opts.ReleaseName = chart
	}
	if opts.ReleaseName == "" {
		opts.ReleaseName = filepath.Base(filepath.Clean(filepath.Join(src.Dir, filepath.FromSlash(src.Path))))
	}
	if opts.Namespace == "" {
		opts.Namespace = "default"
	}
	if opts.KubeVersion == "" && h.clusterVersion != nil {
		opts.KubeVersion = h.clusterVersion()
	}
	for _, file := range h.values {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--values: %w", err)
		}
		var v map[string]any
		if err := yaml.Unmarshal(data, &v); err != nil {
			return nil, fmt.Errorf("--values %s: %w", file, err)
		}
		opts.Values = sources.MergeValues(opts.Values, v)
	}
	for _, kv := range h.set {
		if err := strvals.ParseInto(kv, opts.Values); err != nil {
			return nil, fmt.Errorf("--set %s: %w", kv, err)
		}
	}
	return opts, nil
}

// isChartFolder reports whether dir holds Chart.yaml and no kustomization.
func isChartFolder(dir string) bool {
	if info, err := os.Stat(filepath.Join(dir, "Chart.yaml")); err != nil || !info.Mode().IsRegular() {
		return false
	}
	for _, k := range []string{"kustomization.yaml", "kustomization.yml", "Kustomization"} {
		if _, err := os.Stat(filepath.Join(dir, k)); !errors.Is(err, os.ErrNotExist) {
			return false
		}
	}
	return true
}
