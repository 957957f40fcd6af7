package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/converge-dev/converge/cmd/converge/internal/synctest"
)

// runOffline runs converge without a cluster and returns stdout, stderr and the exit code.
func runOffline(args ...string) (string, string, int) {
	cmd := newRootCommand()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	code := 0
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		code = exitCode(err)
		errOut.WriteString(err.Error())
	}
	return out.String(), errOut.String(), code
}

// TestBuildExamples renders the demo overlay offline and compares it with a golden file.
func TestBuildExamples(t *testing.T) {
	out, errOut, code := runOffline("build", "../../examples/demo/overlays/local")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	golden(t, "build-demo-local.yaml", "\x00", out)
}

// TestBuildBadInput checks bad input exits 2 with a message naming the file or path.
func TestBuildBadInput(t *testing.T) {
	dir := t.TempDir()
	writeSet(t, dir, "x", map[string]string{"bad.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {namespace: x}\n"})
	for _, tc := range []struct{ name, path, want string }{
		{"missing name", dir, "bad.yaml"},
		{"missing path", dir + "/nope", "nope"},
	} {
		_, errOut, code := runOffline("build", tc.path)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d, error %q; want exit 2 naming %q", tc.name, code, errOut, tc.want)
		}
	}
}

// TestBuildIsUntrustedSafe: `converge build` builds kustomizations in a render child (no
// request reaches the test server whatever field names it) and enforces --max-objects.
func TestBuildIsUntrustedSafe(t *testing.T) {
	url, hits := synctest.CountingServer(t, "k: v\n")
	dir := t.TempDir()
	writeSet(t, dir, "x", map[string]string{
		"kustomization.yaml": "resources: [cm.yaml]\nconfigMapGenerator: [{name: c, files: [" + url + "/f]}]\n",
		"cm.yaml":            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
	})
	_, errOut, code := runOffline("build", dir)
	if code != 2 || !strings.Contains(errOut, "kustomization.yaml: configMapGenerator[0].files[0]: remote bases are disabled") || hits.Load() != 0 {
		t.Errorf("exit %d, %d requests, error %q; want exit 2, no request, the file and field named", code, hits.Load(), errOut)
	}

	plain := t.TempDir()
	writeSet(t, plain, "x", map[string]string{"a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n"})
	if _, errOut, code := runOffline("build", "--max-objects", "1", plain); code != 2 || !strings.Contains(errOut, "too many objects: 2 objects, more than 1") {
		t.Errorf("--max-objects 1: exit %d, error %q; want exit 2 and the count", code, errOut)
	}
	if _, errOut, code := runOffline("build", "--max-objects", "2", plain); code != 0 {
		t.Errorf("--max-objects 2: exit %d: %s", code, errOut)
	}
}
