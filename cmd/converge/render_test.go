package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/converge-dev/converge/sources"
)

// TestDaemonRenderTimeout: the daemon's load stops a render that does not end at
// --build-timeout, with a transient RenderTimeout error naming the kustomization.
func TestDaemonRenderTimeout(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"stuck/kustomization.yaml": "resources: [cm.yaml]\n",
		"stuck/cm.yaml":            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
	} {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("CONVERGE_RENDER_TEST_HANG", "stuck") // the build blocks (test-only hook)
	rs := renderSettings{timeout: time.Second}
	_, err := rs.load(t.Context(), sources.NewLoader(t.TempDir()), sources.Source{Dir: dir, Path: "stuck"})
	if err == nil || !strings.Contains(err.Error(), "RenderTimeout: fetch and render did not finish within 1s") ||
		!strings.Contains(err.Error(), "stuck/kustomization.yaml") || !errors.Is(err, context.DeadlineExceeded) || sources.IsTerminal(err) {
		t.Errorf("load: %v; want a transient RenderTimeout naming stuck/kustomization.yaml", err)
	}
}
