package main

import (
	"strings"
	"testing"
)

// TestCheckRefusesWhatApplyWould: "converge check" (and "build --validate") refuses, offline,
// an unknown built-in kind naming the kind meant, an unquoted number in a label, a string
// where a number goes and an unknown field, each naming the file and the object; a valid
// folder passes (without it: build printed all of them and exited 0, so it could not
// serve as a lint step).
func TestCheckRefusesWhatApplyWould(t *testing.T) {
	cm := func(extra string) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n" + extra + "data: {a: b}\n"
	}
	deploy := func(spec string) string {
		return "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n" + spec +
			"  selector: {matchLabels: {a: b}}\n  template:\n    metadata: {labels: {a: b}}\n    spec: {containers: [{name: c, image: busybox}]}\n"
	}
	for _, tc := range []struct{ name, file, want string }{
		{"valid", cm("") + "---\n" + deploy("  replicas: 2\n") + "---\napiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nspec: {anything: 1}\n", ""},
		{"unknown kind", strings.Replace(cm(""), "ConfigMap", "ConfigMpa", 1), "x.yaml:1: ConfigMpa c: v1 has no kind ConfigMpa: did you mean ConfigMap?"},
		{"number label", cm("  labels: {version: 1.5}\n"), "x.yaml:1: ConfigMap c: invalid for v1: .metadata.labels: expected a string, got a number (quote the value"},
		{"string replicas", deploy("  replicas: \"2\"\n"), "x.yaml:1: Deployment d: invalid for apps/v1: .spec.replicas: expected a number, got a string"},
		{"unknown field", deploy("  replicas: 2\n  replcas: 3\n"), `x.yaml:1: Deployment d: invalid for apps/v1: unknown field "spec.replcas"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeSet(t, dir, "", map[string]string{"x.yaml": tc.file})
			for _, args := range [][]string{{"check", dir}, {"build", "--validate", dir}} {
				out, errOut, code := runOffline(args...)
				if tc.want == "" {
					if code != 0 || (args[0] == "check" && !strings.Contains(out, "3 objects checked")) {
						t.Errorf("%v: exit %d, out %q, err %q; want 0", args, code, out, errOut)
					}
					continue
				}
				if code != 2 || !strings.Contains(errOut, tc.want) {
					t.Errorf("%v: exit %d, err %q; want 2 and %q", args, code, errOut, tc.want)
				}
			}
		})
	}
}
