package sources

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/ignore"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/releaseutil"
	"sigs.k8s.io/yaml"
)

// What a render child does with a Helm chart, the way `helm template` does, and no more:
// no release is stored, nothing talks to a cluster (`lookup` returns an empty map, as in
// `helm template`), no DNS (`getHostByName` returns ""), and http.DefaultTransport
// refuses every request. The chart is read from its own folder only, through os.Root:
// no symlink leads out of it.

// helmTemplate renders the chart folder (or packaged chart) rel, a slash path under root,
// with h, and returns each object as JSON with the file it came from (a slash path under
// root, "x.tgz/templates/y.yaml" for a packaged chart's). Files read are counted in b.
func helmTemplate(root, rel string, h HelmOptions, ign ignoredSet, b *budget) ([][]byte, []string, error) {
	chartYAML := path.Join(rel, chartFile)
	// A packaged chart, or a vendored .tgz subchart, is inflated in memory: bounded as any
	// file of the chart.
	loader.MaxDecompressedFileSize = b.limits.MaxFileSize
	chrt, err := loadChart(root, rel, ign, b)
	if err != nil {
		return nil, nil, err
	}
	name := chrt.Name()
	fail := func(what string, err error) error {
		return chartError(rel, name, chartYAML, fmt.Errorf("%s: %w", what, err))
	}
	caps, err := capabilities(h)
	if err != nil {
		return nil, nil, &InputError{File: chartYAML, Err: err}
	}
	if kv := chrt.Metadata.KubeVersion; kv != "" && !chartutil.IsCompatibleRange(kv, caps.KubeVersion.String()) {
		return nil, nil, &InputError{File: chartYAML, Err: fmt.Errorf("chart requires kubeVersion %s, incompatible with %s (set kubeVersion, or --kube-version)", kv, caps.KubeVersion.String())}
	}
	vals := map[string]any{}
	for k, v := range h.Values {
		vals[k] = v
	}
	if err := chartutil.ProcessDependenciesWithMerge(chrt, vals); err != nil {
		return nil, nil, fail("dependencies", err)
	}
	opts := chartutil.ReleaseOptions{Name: h.ReleaseName, Namespace: h.Namespace, Revision: 1, IsInstall: true}
	renderVals, err := chartutil.ToRenderValues(chrt, vals, opts, caps)
	if err != nil {
		return nil, nil, fail("values", err)
	}
	var e engine.Engine // no client: lookup returns empty; EnableDNS false: no DNS
	rendered, err := e.Render(chrt, renderVals)
	if err != nil && strings.HasPrefix(err.Error(), "template: ") {
		return nil, nil, chartError(rel, name, chartYAML, err) // Helm's message says it already
	}
	if err != nil {
		return nil, nil, fail("template", err)
	}
	for k := range rendered {
		if strings.HasSuffix(k, "/NOTES.txt") {
			delete(rendered, k)
		}
	}
	hooks, manifests, err := releaseutil.SortManifests(rendered, nil, releaseutil.InstallOrder)
	if err != nil {
		return nil, nil, fail("rendered manifests", err)
	}
	out := chartObjects(rel, chrt, h.IncludeCRDs, hooks, manifests)
	if n := len(out.resources); n > b.limits.MaxObjects {
		return nil, nil, tooManyObjects(chartYAML, n, b.limits.MaxObjects)
	}
	if err := errors.Join(out.errs...); err != nil || len(h.PostRenderers) == 0 {
		return out.resources, out.origins, err
	}
	// A patch can change or drop objects, never add one: MaxObjects still holds.
	return postRender(out.resources, out.origins, h.PostRenderers, chartYAML)
}

// loadChart loads the chart folder or packaged chart rel.
func loadChart(root, rel string, ign ignoredSet, b *budget) (*chart.Chart, error) {
	if isArchive(rel) {
		r, err := os.OpenRoot(root)
		if err != nil {
			return nil, fmt.Errorf("%s: open source: %w", rel, err)
		}
		defer func() { _ = r.Close() }()
		data, err := readFile(r, rel, b)
		if err != nil {
			return nil, err
		}
		loader.MaxDecompressedChartSize = b.remaining()
		chrt, err := loader.LoadArchive(bytes.NewReader(data))
		if err != nil {
			return nil, &InputError{File: rel, Err: loadError(err)}
		}
		return chrt, nil
	}
	loader.MaxDecompressedChartSize = b.remaining()
	files, err := readChart(root, rel, ign, b)
	if err != nil {
		return nil, err
	}
	chrt, err := loader.LoadFiles(files)
	if err != nil {
		return nil, &InputError{File: path.Join(rel, chartFile), Err: loadError(err)}
	}
	return chrt, nil
}

// chartObjects orders a chart's render: its CRDs (when included), the kept pre- hooks,
// its manifests, the kept post- hooks.
func chartObjects(rel string, chrt *chart.Chart, includeCRDs bool, hooks []*release.Hook, manifests []releaseutil.Manifest) *manifestsOut {
	out, name := &manifestsOut{}, chrt.Name()
	if includeCRDs {
		for _, crd := range chrt.CRDObjects() {
			out.add(rel, name, crd.Filename, string(crd.File.Data))
		}
	}
	pre, post := splitHooks(hooks)
	for _, hk := range pre {
		out.addHook(rel, name, hk.Path, hk.Manifest)
	}
	for _, m := range manifests {
		out.add(rel, name, m.Name, m.Content)
	}
	for _, hk := range post {
		out.addHook(rel, name, hk.Path, hk.Manifest)
	}
	return out
}

// loadError says which limit a vendored .tgz subchart passed when inflated (the loader's
// bounds are set from MaxFileSize and what is left of MaxTotalSize), naming its flag.
func loadError(err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "decompressed chart file") && strings.Contains(msg, "larger than the maximum"):
		return fmt.Errorf("load chart: %w: %s (raise the limit with --max-file-size)", ErrFileTooLarge, msg)
	case strings.Contains(msg, "decompressed chart is larger than the maximum"):
		return fmt.Errorf("load chart: %w: %s (raise the limit with --max-total-size)", ErrSourceTooLarge, msg)
	}
	return fmt.Errorf("load chart: %w", err)
}

// capabilities returns Helm's default capabilities with h's Kubernetes version and API
// versions, as `helm template --kube-version --api-versions` sets them.
func capabilities(h HelmOptions) (*chartutil.Capabilities, error) {
	caps := chartutil.DefaultCapabilities.Copy()
	if h.KubeVersion != "" {
		kv, err := chartutil.ParseKubeVersion(h.KubeVersion)
		if err != nil {
			return nil, fmt.Errorf("kubeVersion %q: %w", h.KubeVersion, err)
		}
		caps.KubeVersion = *kv
	}
	caps.APIVersions = append(caps.APIVersions, h.APIVersions...)
	return caps, nil
}

// Hooks are not run: Converge applies what a chart renders and prunes what leaves it, so a
// hook is either one of the chart's objects or dropped (keepHook). A pre-install or
// pre-upgrade hook is rendered before the chart's other objects and a post- hook after
// them (the engine's staged apply still puts CRDs and namespaces first); neither waits for
// the other, and hook weights are not honoured. Helm never updates a hook in place: it
// creates it anew on each run (deleting the previous one first, before-hook-creation, its
// default). A kept hook carries ForceAnnotation, so the engine recreates it when an
// immutable field changed (a Job's template) instead of failing, and applies it in place
// otherwise. hook-succeeded and hook-failed (delete after the run) are not honoured: the
// hook stays in the cluster as an object of the Sync until it leaves the chart.
//
// ForceAnnotation and ForceEnabled are the engine's (engine.ForceAnnotation), which sources
// may not import; cmd/converge/daemon tests that they match.
const (
	ForceAnnotation = "converge.dev/force"
	ForceEnabled    = "enabled"
)

var keptHookEvents = map[release.HookEvent]bool{
	release.HookPreInstall: true, release.HookPreUpgrade: true,
	release.HookPostInstall: true, release.HookPostUpgrade: true,
}

// keepHook reports whether a hook is applied: when it fires on install or upgrade.
// test, pre/post-delete and pre/post-rollback hooks only are dropped: Converge runs no
// tests, deletes by pruning its inventory, and never rolls back.
func keepHook(hk *release.Hook) bool {
	for _, e := range hk.Events {
		if keptHookEvents[e] {
			return true
		}
	}
	return false
}

// splitHooks returns the kept hooks that fire before the chart's objects (pre-install or
// pre-upgrade) and those after, each in Helm's order (weight, then kind, then name).
func splitHooks(hooks []*release.Hook) (pre, post []*release.Hook) {
	for _, hk := range hooks {
		if !keepHook(hk) {
			continue
		}
		early := false
		for _, e := range hk.Events {
			early = early || e == release.HookPreInstall || e == release.HookPreUpgrade
		}
		if early {
			pre = append(pre, hk)
		} else {
			post = append(post, hk)
		}
	}
	return pre, post
}

// manifestsOut collects a render's objects as JSON, with the file each came from.
type manifestsOut struct {
	resources [][]byte
	origins   []string
	errs      []error
}

// addHook is add for a kept hook's manifest: each object gets ForceAnnotation.
func (o *manifestsOut) addHook(rel, chartName, name, content string) {
	from := len(o.resources)
	o.add(rel, chartName, name, content)
	for i := from; i < len(o.resources); i++ {
		var obj map[string]any
		if err := json.Unmarshal(o.resources[i], &obj); err != nil {
			continue // not an object: the parent reports it
		}
		meta, _ := obj["metadata"].(map[string]any)
		if meta == nil {
			continue // no metadata: the parent reports it
		}
		ann, _ := meta["annotations"].(map[string]any)
		if ann == nil {
			ann = map[string]any{}
			meta["annotations"] = ann
		}
		ann[ForceAnnotation] = ForceEnabled
		if js, err := json.Marshal(obj); err == nil {
			o.resources[i] = js
		}
	}
}

// add converts each YAML document of content, rendered from the chart file name (a Helm
// template name "chart/templates/x.yaml", or a crds/ path), into JSON.
func (o *manifestsOut) add(rel, chartName, name, content string) {
	file := chartPath(rel, chartName, name)
	for _, d := range splitDocuments([]byte(content)) {
		if len(bytes.TrimSpace(d.data)) == 0 {
			continue
		}
		js, err := yaml.YAMLToJSON(d.data)
		if err != nil {
			o.errs = append(o.errs, &InputError{File: file, Err: fmt.Errorf("rendered YAML: %w", err)})
			continue
		}
		if string(js) == "null" {
			continue // only comments
		}
		o.resources = append(o.resources, js)
		o.origins = append(o.origins, file)
	}
}

// chartPath turns a name Helm gives a chart file ("chart/templates/x.yaml",
// "chart/charts/sub/templates/y.yaml", or a crds/ file's path) into a slash path under
// the source root.
func chartPath(rel, chartName, name string) string {
	if chartName != "" {
		name = strings.TrimPrefix(name, chartName+"/")
	}
	return path.Join(rel, name)
}

// templateLine finds a chart file, and the line if any, that a Helm error names: its
// template errors read "template: chart/templates/x.yaml:5:12: executing ...", "parse error
// at (chart/templates/x.yaml:5): ...", "execution error at (chart/templates/x.yaml:5:3):
// ..." or "YAML parse error on chart/templates/x.yaml: ...".
var templateLine = regexp.MustCompile(`([A-Za-z0-9_.\-/]+\.(?:ya?ml|tpl|txt|json))(?::(\d+))?`)

// chartError makes err an InputError naming the chart file and line it names, or file.
// Helm's message is kept whole: it says what failed in which template.
func chartError(rel, chartName, file string, err error) error {
	ie := &InputError{File: file, Err: err}
	if chartName != "" {
		for _, m := range templateLine.FindAllStringSubmatch(err.Error(), -1) {
			if strings.HasPrefix(m[1], chartName+"/") {
				ie.File = chartPath(rel, chartName, m[1])
				ie.Line, _ = strconv.Atoi(m[2])
				break
			}
		}
	}
	return ie
}

// readChart reads the files of the chart folder rel, as Helm's loader.LoadDir does
// (.helmignore honoured, a UTF-8 BOM dropped), but through an os.Root at the chart folder:
// a symlink that leads out of it is refused, a symlinked folder is refused, what ign holds
// (RenderOptions.Ignored) is skipped, and every file is counted in b (MaxFiles,
// MaxFileSize, MaxTotalSize).
func readChart(root, rel string, ign ignoredSet, b *budget) ([]*loader.BufferedFile, error) {
	r, err := os.OpenRoot(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		return nil, fmt.Errorf("%s: open chart: %w", rel, err)
	}
	defer func() { _ = r.Close() }()
	rules, err := helmIgnore(r, rel, b)
	if err != nil {
		return nil, err
	}
	var files []*loader.BufferedFile
	err = fs.WalkDir(r.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == "." {
			return err
		}
		info, err := r.Stat(p) // follows a symlink, inside the chart only
		switch {
		case escapes(err):
			return chartEscape(path.Join(rel, p))
		case err != nil:
			return &InputError{File: path.Join(rel, p), Err: fmt.Errorf("chart file: %w", err)}
		case d.Type()&fs.ModeSymlink != 0 && info.IsDir():
			return &InputError{File: path.Join(rel, p), Err: errors.New("a symlinked folder in a chart is not followed: vendor its files")}
		}
		if rules.Ignore(p, info) || ign.has(path.Join(rel, p)) {
			if info.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if info.IsDir() {
			return nil
		}
		if !info.Mode().IsRegular() {
			return &InputError{File: path.Join(rel, p), Err: errors.New("not a regular file")}
		}
		if len(files) >= b.limits.MaxFiles {
			return tooManyFiles(rel, b.limits.MaxFiles)
		}
		data, err := readChartFile(r, rel, p, b)
		if err != nil {
			return err
		}
		files = append(files, &loader.BufferedFile{Name: p, Data: bytes.TrimPrefix(data, []byte("\xEF\xBB\xBF"))})
		return nil
	})
	if err != nil {
		if IsTerminal(err) {
			return nil, err
		}
		return nil, fmt.Errorf("%s: read chart: %w", rel, err)
	}
	return files, nil
}

// errChartEscape is ErrPathEscape through a symlink of a chart folder; like
// errSymlinkEscape, it names no target.
var errChartEscape = chartEscapeError{}

type chartEscapeError struct{}

func (chartEscapeError) Error() string { return "symlink points outside the chart folder" }
func (chartEscapeError) Unwrap() error { return ErrPathEscape }

// chartEscape refuses the slash path p of a chart, which leads out of its folder through a
// symlink.
func chartEscape(p string) error {
	return &InputError{File: p, Err: errChartEscape}
}

// helmIgnore reads the chart's .helmignore, if any, with Helm's default rules added.
func helmIgnore(r *os.Root, rel string, b *budget) (*ignore.Rules, error) {
	rules := ignore.Empty()
	if _, err := r.Stat(ignore.HelmIgnore); err == nil {
		data, err := readChartFile(r, rel, ignore.HelmIgnore, b)
		if err != nil {
			return nil, err
		}
		if rules, err = ignore.Parse(bytes.NewReader(data)); err != nil {
			return nil, &InputError{File: path.Join(rel, ignore.HelmIgnore), Err: err}
		}
	} else if escapes(err) {
		return nil, chartEscape(path.Join(rel, ignore.HelmIgnore))
	}
	rules.AddDefaults()
	return rules, nil
}

// readChartFile reads the chart file p (a slash path in the chart folder r, rel under the
// source root) within b, its errors naming it under the source root.
func readChartFile(r *os.Root, rel, p string, b *budget) ([]byte, error) {
	data, err := readFile(r, p, b)
	var ie *InputError
	switch {
	case errors.As(err, &ie) && ie.File == p:
		ie.File = path.Join(rel, p)
		return nil, ie
	case err != nil && !IsTerminal(err):
		return nil, fmt.Errorf("%s: %w", path.Join(rel, p), err)
	}
	return data, err
}
