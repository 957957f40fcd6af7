package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/converge-dev/converge/e2e/cluster"
)

// cmGate is a ConfigMap whose readiness the rules below read from its label "gate".
const cmGate = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: gated, namespace: NS, labels: {gate: GATE}}\n"

// gateRules judge ConfigMaps by their "gate" label: open is current, shut is failed.
const gateRules = `- apiVersion: v1
  kind: ConfigMap
  current: "has(metadata.labels) && 'gate' in metadata.labels && metadata.labels.gate == 'open'"
  failed: "has(metadata.labels) && 'gate' in metadata.labels && metadata.labels.gate == 'shut'"
`

// TestApplyCLIHealthFlags waits with a Sync's health rules from the command line: a CEL rule
// that says failed ends the wait with exit 2 and its message; one that says current lets
// the apply succeed; --health-check waits for an object outside the set and fails the apply
// while it does not exist.
func TestApplyCLIHealthFlags(t *testing.T) {
	cluster.Require(t, env)
	ns := env.Namespace(t)
	dir := filepath.Join(t.TempDir(), "app")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rules, []byte(gateRules), 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{"apply", dir, "-n", ns, "--inventory", ns + "/gates", "--wait", "--timeout", "20s", "--health-check-exprs", rules}

	writeSet(t, dir, ns, map[string]string{"cm.yaml": strings.Replace(cmGate, "GATE", "shut", 1)})
	out, code := cli(t, base...)
	if code != exitCodeError || !strings.Contains(out, "failed") || !strings.Contains(out, "gated") {
		t.Fatalf("shut gate: exit %d, output:\n%s\nwant exit 2 naming the failed ConfigMap", code, out)
	}

	writeSet(t, dir, ns, map[string]string{"cm.yaml": strings.Replace(cmGate, "GATE", "open", 1)})
	if out, code := cli(t, base...); code != 0 {
		t.Fatalf("open gate: exit %d, output:\n%s", code, out)
	}

	out, errOut, code := runOffline(append(base, "--kubeconfig", env.Kubeconfig, "--timeout", "2s", "--health-check", ns+"/Deployment.apps/missing")...)
	if code != exitCodeError || !strings.Contains(errOut, "Deployment") || !strings.Contains(errOut, "missing") {
		t.Fatalf("health check on a missing Deployment: exit %d, output:\n%s\nerror: %s\nwant exit 2 naming it", code, out, errOut)
	}
}

// TestApplyCLIHealthFlagsBadInput: a malformed --health-check, a rules file with an unknown
// field, and an expression that does not compile are refused before anything is read or
// applied, naming the flag value or the file (and CEL's position).
func TestApplyCLIHealthFlagsBadInput(t *testing.T) {
	dir := t.TempDir()
	writeSet(t, dir, "x", map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"})
	file := func(content string) string {
		p := filepath.Join(t.TempDir(), "rules.yaml")
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	typo := file("- {apiVersion: v1, kind: ConfigMap, curent: 'true'}\n")
	noCurrent := file("- {apiVersion: v1, kind: ConfigMap}\n")
	broken := file("- {apiVersion: v1, kind: ConfigMap, current: 'metadata.labels.gate =='}\n")
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"one part", []string{"--health-check", "web"}, []string{`--health-check "web"`, "[NAMESPACE/]KIND[.GROUP]/NAME"}},
		{"four parts", []string{"--health-check", "a/b/c/d"}, []string{`"a/b/c/d"`}},
		{"empty name", []string{"--health-check", "Deployment.apps/"}, []string{`"Deployment.apps/"`}},
		{"unknown field", []string{"--health-check-exprs", typo}, []string{typo, "curent"}},
		{"no current", []string{"--health-check-exprs", noCurrent}, []string{noCurrent, "entry 0", "current"}},
		{"does not compile", []string{"--health-check-exprs", broken}, []string{broken, "healthCheckExprs[0]", "current", ":1:"}},
		{"no file", []string{"--health-check-exprs", filepath.Join(dir, "nope.yaml")}, []string{"nope.yaml"}},
	} {
		// The kubeconfig does not exist: the flags must fail first.
		args := append([]string{"apply", dir, "--kubeconfig", filepath.Join(dir, "none"), "--inventory", "x/app"}, tc.args...)
		out, errOut, code := runOffline(args...)
		if code != exitCodeError || out != "" {
			t.Errorf("%s: exit %d, stdout %q; want exit 2, no stdout", tc.name, code, out)
		}
		for _, want := range tc.want {
			if !strings.Contains(errOut, want) {
				t.Errorf("%s: the error %q does not say %q", tc.name, errOut, want)
			}
		}
	}
}
