package main

import (
	"strings"
	"testing"

	"github.com/converge-dev/converge/e2e/cluster"
)

// TestApplySchemaErrorReadsAsTheSource: a substituted `${replicas:=2}` in a ConfigMap's data
// is a number the API server refuses; the error names the field and the value as the source
// wrote it and says how to quote it, not the API server's Go value (without it:
// ".data.replicas: expected string, got &value.valueUnstructured{Value:2}").
func TestApplySchemaErrorReadsAsTheSource(t *testing.T) {
	cluster.Require(t, env)
	ns := env.Namespace(t)
	dir := t.TempDir()
	writeSet(t, dir, ns, map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: " + ns + "}\n" +
		"data: {replicas: '${replicas:=2}'}\n"})
	out, code := cli(t, "apply", dir, "-n", ns, "--inventory", ns+"/schema", "--substitute", "other=x")
	if code != 2 || strings.Contains(out, "valueUnstructured") || !strings.Contains(out, ".data.replicas: expected a string, got 2") ||
		!strings.Contains(out, `'"2"'`) {
		t.Errorf("exit %d, want 2 and the field, the value as written and how to quote it:\n%s", code, out)
	}
}
