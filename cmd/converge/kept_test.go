package main

import (
	"strings"
	"testing"

	"github.com/converge-dev/converge/e2e/cluster"
)

// TestApplyDryRunNamesObjectsLeftWithoutPrune: an object that left the source stays without
// --prune; a dry-run names it, says how to delete it and exits 1 (the cluster differs from
// the source), and so does the apply's report (without it: the dry-run exited 0 and said
// nothing of it).
func TestApplyDryRunNamesObjectsLeftWithoutPrune(t *testing.T) {
	cluster.Require(t, env)
	ns := env.Namespace(t)
	dir := t.TempDir()
	cm := func(name string) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: " + name + ", namespace: NS}\ndata: {k: v}\n"
	}
	writeSet(t, dir, ns, map[string]string{"a.yaml": cm("a"), "b.yaml": cm("b")})
	kube := []string{"-n", ns, "--inventory", ns + "/kept"}
	if out, code := cli(t, append([]string{"apply", dir}, kube...)...); code != 0 {
		t.Fatalf("apply: exit %d\n%s", code, out)
	}
	writeSet(t, dir, ns, map[string]string{"a.yaml": cm("a")})
	want := "ConfigMap/" + ns + "/b left the source; kept: pass --prune to delete it"
	out, code := cli(t, append([]string{"apply", dir, "--dry-run"}, kube...)...)
	if code != 1 || !strings.Contains(out, want) || !strings.Contains(out, "1 left the source and kept (no --prune)") {
		t.Errorf("dry-run: exit %d, want 1 and %q\n%s", code, want, out)
	}
	out, code = cli(t, append([]string{"apply", dir}, kube...)...)
	if code != 0 || !strings.Contains(out, want) {
		t.Errorf("apply: exit %d, want 0 and %q\n%s", code, want, out)
	}
	out, code = cli(t, append([]string{"apply", dir, "--prune", "--dry-run"}, kube...)...)
	if code != 1 || !strings.Contains(out, "ConfigMap/"+ns+"/b pruned (dry run)") {
		t.Errorf("dry-run with --prune: exit %d, want 1 and b pruned\n%s", code, out)
	}
}
