package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/converge-dev/converge/e2e/cluster"
)

// runWithInput runs converge against the test cluster with stdin in.
func runWithInput(t *testing.T, in string, args ...string) (string, int) {
	t.Helper()
	cmd := newRootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetIn(strings.NewReader(in))
	cmd.SetArgs(append([]string{"--kubeconfig", env.Kubeconfig}, args...))
	code := 0
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		code = exitCode(err)
		out.WriteString(err.Error())
	}
	return out.String(), code
}

// TestApplyFromStdin: PATH "-" reads the objects from stdin, as kubectl apply -f -: build
// prints them, apply applies them to its inventory and a dry-run of the same stream finds
// nothing to do, errors name stdin.yaml (without it: "-" was a folder that does not
// exist).
func TestApplyFromStdin(t *testing.T) {
	cluster.Require(t, env)
	ns := env.Namespace(t)
	stream := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: from-stdin}\ndata: {a: b}\n"
	if out, code := runWithInput(t, stream, "build", "-"); code != 0 || !strings.Contains(out, "name: from-stdin") {
		t.Fatalf("build -: exit %d\n%s", code, out)
	}
	kube := []string{"-n", ns, "--inventory", ns + "/stdin"}
	if out, code := runWithInput(t, stream, append([]string{"apply", "-"}, kube...)...); code != 0 || !strings.Contains(out, "ConfigMap/"+ns+"/from-stdin created") {
		t.Fatalf("apply -: exit %d\n%s", code, out)
	}
	if out, code := runWithInput(t, stream, append([]string{"apply", "-", "--dry-run"}, kube...)...); code != 0 {
		t.Errorf("dry-run of the same stream: exit %d, want 0\n%s", code, out)
	}
	if out, code := runWithInput(t, "kind: ConfigMap\n", "build", "-"); code != 2 || !strings.Contains(out, "stdin.yaml") {
		t.Errorf("bad stream: exit %d, want 2 naming stdin.yaml\n%s", code, out)
	}
}
