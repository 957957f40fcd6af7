package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/e2e/cluster"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// cli runs converge with args in-process and returns stdout and the exit code.
func cli(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := newRootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(append([]string{"--kubeconfig", env.Kubeconfig}, args...))
	err := cmd.ExecuteContext(context.Background())
	code := 0
	if err != nil {
		code = exitCode(err)
	}
	return out.String(), code
}

var revisionRE = regexp.MustCompile(`sha256:[0-9a-f]{64}`)

// golden compares got, with the namespace and revision normalized, to testdata/name.
func golden(t *testing.T, name, ns, got string) {
	t.Helper()
	got = revisionRE.ReplaceAllString(strings.ReplaceAll(got, ns, "NS"), "sha256:REV")
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s (-want +got):\n%s", name, diff)
	}
}

// writeSet replaces the files of dir with files (content "NS" is the namespace).
func writeSet(t *testing.T, dir, ns string, files map[string]string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		_ = os.RemoveAll(filepath.Join(dir, e.Name()))
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(strings.ReplaceAll(content, "NS", ns)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// resourceVersions maps the ConfigMaps of ns to their resourceVersions.
func resourceVersions(t *testing.T, ns string) map[string]string {
	t.Helper()
	list := &corev1.ConfigMapList{}
	c, err := client.New(env.Config, client.Options{Scheme: newScheme()})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	rv := map[string]string{}
	for _, cm := range list.Items {
		rv[cm.Name] = cm.ResourceVersion
	}
	return rv
}

// TestApplyCLI walks "converge apply" through a fresh apply, a no-op, a change, a prune and
// a failed object, in dry-run and real mode: golden output, exit codes, and a dry-run that
// never changes the cluster (resourceVersions before and after).
func TestApplyCLI(t *testing.T) {
	cluster.Require(t, env)
	ns := env.Namespace(t)
	dir := filepath.Join(t.TempDir(), "app")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	inv := "--inventory=" + ns + "/app"
	v1 := map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "1", 1), "b.yaml": cmB}
	v2 := map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "2", 1)}
	bad := map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "2", 1),
		"svc.yaml": "apiVersion: v1\nkind: Service\nmetadata: {name: bad, namespace: NS}\nspec: {ports: [{port: 70000}]}\n"}
	steps := []struct {
		name  string
		files map[string]string
		args  []string
		code  int
	}{
		{"fresh-dry-run", v1, []string{"--dry-run"}, 1},
		{"fresh", v1, nil, 0},
		{"noop-dry-run", v1, []string{"--dry-run"}, 0},
		{"noop", v1, nil, 0},
		{"change-and-prune-dry-run", v2, []string{"--dry-run", "--diff"}, 1},
		{"change-and-prune-json", v2, []string{"-o", "json"}, 0},
		{"failed-object", bad, nil, 2},
	}
	for _, st := range steps {
		writeSet(t, dir, ns, st.files)
		before := resourceVersions(t, ns)
		args := append([]string{"apply", dir, "-n", ns, inv, "--prune"}, st.args...)
		out, code := cli(t, args...)
		if code != st.code {
			t.Errorf("%s: exit code %d, want %d; output:\n%s", st.name, code, st.code, out)
		}
		golden(t, "apply-"+st.name+".txt", ns, out)
		if strings.Contains(st.name, "dry-run") {
			if diff := cmp.Diff(before, resourceVersions(t, ns)); diff != "" {
				t.Errorf("%s: a dry-run changed the cluster (-before +after):\n%s", st.name, diff)
			}
		}
	}
}

const widgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.cli.converge.dev}
spec:
  group: cli.converge.dev
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: integer}}}
`

const widget = `apiVersion: cli.converge.dev/v1
kind: Widget
metadata: {name: w, namespace: NS}
spec: {size: 1}
`

// TestApplyCLICRDAndCustomResources applies a CRD and its custom resource in one set: the
// dry-run reports both (the resource as created although its kind does not exist yet) and
// changes nothing; the apply creates both; golden output and exit codes.
func TestApplyCLICRDAndCustomResources(t *testing.T) {
	cluster.Require(t, env)
	ns := env.Namespace(t)
	dir := filepath.Join(t.TempDir(), "widgets")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeSet(t, dir, ns, map[string]string{"crd.yaml": widgetCRD, "widget.yaml": widget})
	t.Cleanup(func() { // the CRD is cluster-scoped: leave no trace for a later run
		c, err := client.New(env.Config, client.Options{Scheme: newScheme()})
		if err == nil {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			crd.Name = "widgets.cli.converge.dev"
			_ = c.Delete(context.Background(), crd)
		}
	})
	for _, st := range []struct {
		name string
		args []string
		code int
	}{
		{"crd-dry-run", []string{"--dry-run"}, 1},
		{"crd", nil, 0},
		{"crd-noop", nil, 0},
	} {
		out, code := cli(t, append([]string{"apply", dir, "-n", ns, "--inventory=" + ns + "/widgets", "--prune"}, st.args...)...)
		if code != st.code {
			t.Errorf("%s: exit code %d, want %d; output:\n%s", st.name, code, st.code, out)
		}
		golden(t, "apply-"+st.name+".txt", ns, out)
	}
}

// TestColorDiff checks diff colouring is only applied when asked (a terminal).
func TestColorDiff(t *testing.T) {
	diff := "--- live/x\n+++ desired/x\n@@ -1 +1 @@\n-a\n+b\n"
	if got := colorDiff(diff, false); got != diff {
		t.Errorf("uncoloured diff changed:\n%q", got)
	}
	got := colorDiff(diff, true)
	for _, want := range []string{"\x1b[31m-a\x1b[0m\n", "\x1b[32m+b\x1b[0m\n", "\x1b[36m@@ -1 +1 @@\x1b[0m\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("coloured diff lacks %q:\n%q", want, got)
		}
	}
}
