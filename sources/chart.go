package sources

import (
	"context"
	"path/filepath"
	"strings"

	"github.com/Masterminds/semver/v3"

	"github.com/converge-dev/converge/sources/helmrepo"
	"github.com/converge-dev/converge/sources/oci"
)

// A chart of a Helm repository is fetched as a packaged chart (helmrepo.ChartFile) into a
// cache folder and rendered from there, as a chart folder of a git or OCI source is: an
// HTTP repository through sources/helmrepo (Source.Chart), a chart in an OCI registry as
// the artifact OCIChart names (Source.OCI), its chart layer copied whole.

// IsOCIRepository reports whether a chart repository URL names an OCI registry.
func IsOCIRepository(url string) bool { return strings.HasPrefix(url, "oci://") }

// OCIChart returns the artifact of chart name at version in the OCI repository repo
// ("oci://host[:port]/path"), as `helm pull oci://host/path/name --version` reads it: an
// exact version is its tag ("+" written "_", as helm push does), anything else a semver
// constraint over the tags (empty: the highest without a prerelease). The packaged chart
// is copied to ChartPath.
func OCIChart(repo, name, version string) oci.Artifact {
	a := oci.Artifact{URL: strings.TrimSuffix(repo, "/") + "/" + name,
		Layer: oci.LayerSelector{MediaType: oci.HelmChartMediaType, Operation: oci.OperationCopy, File: helmrepo.ChartFile}}
	if _, err := semver.StrictNewVersion(strings.TrimPrefix(version, "v")); err == nil {
		a.Ref.Tag = strings.ReplaceAll(version, "+", "_")
	} else if version == "" {
		a.Ref.SemVer = "*"
	} else {
		a.Ref.SemVer = version
	}
	return a
}

// ChartPath is the rendered path of a chart fetched from a repository: the packaged chart
// in the fetched folder.
const ChartPath = helmrepo.ChartFile

// fetchChart fetches src.Chart and returns its folder, revision and content digest.
func (l *Loader) fetchChart(ctx context.Context, src Source, opts LoadOptions) (root, revision, digest string, err error) {
	f := opts.Charts
	// The render child reads the packaged chart as one file: a larger one is never rendered,
	// so it is not downloaded either.
	if lim := opts.Render.Limits.withDefaults().MaxFileSize; lim > 0 && (f.MaxChartSize == 0 || lim < f.MaxChartSize) {
		f.MaxChartSize = lim
	}
	res, err := l.charts.Fetch(ctx, src.Chart, f)
	if err != nil {
		return "", "", "", err
	}
	// The archive's digest, not only the folder: a folder named by a version whose index
	// gives no digest may hold another archive after an eviction.
	return res.Dir, res.Revision, "chart:" + filepath.Base(res.Dir) + ":" + res.Digest, nil
}
