package chartrepo

import (
	"os"
	"path/filepath"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
)

// Package packages the chart folder dir at version (its Chart.yaml's when ""), as `helm
// package --version` does, and returns the archive.
func Package(t testing.TB, dir, version string) []byte {
	t.Helper()
	data, err := os.ReadFile(pack(t, dir, version, t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// pack packages the chart folder dir at version into folder out and returns the archive's
// path.
func pack(t testing.TB, dir, version, out string) string {
	t.Helper()
	c, err := loader.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if version != "" {
		c.Metadata.Version = version
	}
	file, err := chartutil.Save(c, out)
	if err != nil {
		t.Fatal(err)
	}
	return file
}

// WriteChart writes files (slash path → content) as a chart folder and returns it.
func WriteChart(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
