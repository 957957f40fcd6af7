package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
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
