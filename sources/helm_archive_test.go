package sources

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
)

// TestHelmRenderPackagedChart: a packaged chart (as `helm package` and a chart repository
// give it) renders the same objects as its folder, each named by the archive and the
// template; a damaged archive and one inflating past the limits are refused naming it.
func TestHelmRenderPackagedChart(t *testing.T) {
	c, err := loader.LoadDir("testdata/charts/app")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file, err := chartutil.Save(c, dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(file, filepath.Join(dir, "chart.tgz")); err != nil {
		t.Fatal(err)
	}
	src, err := filepath.Abs("testdata/charts")
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]any{"replicas": 3}
	want, _, _, err := render(t.Context(), src, "app", chartOptions(values, "v1.31.0"))
	if err != nil {
		t.Fatal(err)
	}
	got, origins, _, err := render(t.Context(), dir, "chart.tgz", chartOptions(values, "v1.31.0"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(kindNames(want), kindNames(got)); diff != "" {
		t.Errorf("packaged chart's objects differ from its folder's (-folder +packaged):\n%s", diff)
	}
	for _, o := range origins {
		if !strings.HasPrefix(o, "chart.tgz/") {
			t.Errorf("origin %q, want a file of chart.tgz", o)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "bad.tgz"), []byte("not gzip"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Render(t.Context(), dir, "bad.tgz", chartOptions(nil, ""))
	var ie *InputError
	if !errors.As(err, &ie) || ie.File != "bad.tgz" {
		t.Errorf("damaged archive: %v, want an input error naming bad.tgz", err)
	}
	opts := chartOptions(nil, "")
	opts.Limits = Limits{MaxFileSize: 256}
	if _, err := Render(t.Context(), dir, "chart.tgz", opts); !errors.Is(err, ErrFileTooLarge) {
		t.Errorf("archive over the file size limit: %v, want ErrFileTooLarge", err)
	}
}
