package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/converge-dev/converge/cmd/converge/internal/synctest"
	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/e2e/gitserver"
)

// writeChart writes a chart "web" into a new folder and returns it: a ConfigMap of its
// values, and a test hook.
func writeChart(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "web")
	files := map[string]string{
		"Chart.yaml":  "apiVersion: v2\nname: web\nversion: 0.1.0\n",
		"values.yaml": "greeting: hi\nimage:\n  repo: nginx\n  tag: \"1.0\"\n",
		"templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-config\n  namespace: {{ .Release.Namespace }}\n" +
			"data:\n  greeting: {{ .Values.greeting | quote }}\n  image: \"{{ .Values.image.repo }}:{{ .Values.image.tag }}\"\n" +
			"{{- if semverCompare \">=1.30-0\" .Capabilities.KubeVersion.Version }}\n  kube: recent\n{{- end }}\n",
		"templates/test.yaml": "apiVersion: v1\nkind: Pod\nmetadata:\n  name: probe\n  annotations:\n    helm.sh/hook: test\n",
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestBuildHelmChart: `converge build` renders a folder with Chart.yaml as a chart, with
// values files merged in order, --set over them, the release name and namespace given (or
// the folder's name and "default"); the test hook is dropped. A template error exits 2
// naming the template and line.
func TestBuildHelmChart(t *testing.T) {
	dir := writeChart(t)
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte("greeting: hello\nimage:\n  tag: \"2.0\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{name: "defaults", want: "apiVersion: v1\ndata:\n  greeting: hi\n  image: nginx:1.0\nkind: ConfigMap\nmetadata:\n  name: web-config\n  namespace: default\n"},
		{name: "values, set, release", args: []string{"-f", values, "--set", "image.repo=caddy", "--release-name", "site", "-n", "apps"},
			want: "apiVersion: v1\ndata:\n  greeting: hello\n  image: caddy:2.0\nkind: ConfigMap\nmetadata:\n  name: site-config\n  namespace: apps\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := runOffline(append([]string{"build", dir}, tc.args...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if out != tc.want {
				t.Errorf("output:\n%s\nwant:\n%s", out, tc.want)
			}
		})
	}
	if err := os.WriteFile(filepath.Join(dir, "templates", "bad.yaml"), []byte("a: {{ .Values.nope.deeper }}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := runOffline("build", dir)
	if code != 2 || errOut != `templates/bad.yaml:1: template: web/templates/bad.yaml:1:13: executing "web/templates/bad.yaml" at <.Values.nope.deeper>: nil pointer evaluating interface {}.deeper` {
		t.Errorf("template error: exit %d, %q; want exit 2 naming templates/bad.yaml:1", code, errOut)
	}
}

// TestApplyCLIHelmChartDryRun: `converge apply --dry-run` renders a chart with its values
// into -n's namespace, .Capabilities.KubeVersion the cluster's, and reports what it would
// create, writing nothing.
func TestApplyCLIHelmChartDryRun(t *testing.T) {
	cluster.Require(t, env)
	ns := env.Namespace(t)
	dir := writeChart(t)
	out, errOut, code := cliErr("apply", dir, "-n", ns, "--dry-run", "--diff", "--set", "greeting=dry")
	if code != exitCodeChanges {
		t.Fatalf("exit %d, want 1 (changes found):\n%s%s", code, out, errOut)
	}
	if want := "ConfigMap/" + ns + "/web-config created (dry run)"; !strings.Contains(out, want) {
		t.Errorf("the dry-run output does not say %q:\n%s", want, out)
	}
	if want := "kube: recent"; !strings.Contains(out, want) {
		t.Errorf("the chart did not see the cluster's version (%q):\n%s", want, out)
	}
	if strings.Contains(out, "probe") {
		t.Errorf("the test hook is in the set:\n%s", out)
	}
	if got := resourceVersions(t, ns); len(got) > 1 { // kube-root-ca.crt only
		t.Errorf("the dry-run wrote ConfigMaps: %v", got)
	}
}

// TestBuildHelmChartFromGit: with --git-url, --helm renders --path of the fetched commit as
// a chart (its content is not known before the fetch, so nothing is guessed); without it
// the chart folder is read as plain YAML and fails naming a template.
func TestBuildHelmChartFromGit(t *testing.T) {
	srv, err := gitserver.Start(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	src := t.TempDir()
	synctest.Publish(t, srv, src, "", map[string]string{
		"charts/web/Chart.yaml":        "apiVersion: v2\nname: web\nversion: 0.1.0\n",
		"charts/web/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\ndata:\n  v: {{ .Values.v | quote }}\n",
	})
	args := []string{"build", "--git-url", srv.RepoURL("app"), "--path", "charts/web", "--git-cache-dir", t.TempDir()}
	out, errOut, code := runOffline(append(args, "--helm", "--set", "v=from-git")...)
	if want := "apiVersion: v1\ndata:\n  v: from-git\nkind: ConfigMap\nmetadata:\n  name: web\n"; code != 0 || out != want {
		t.Errorf("--helm: exit %d, %q, stderr %s; want:\n%s", code, out, errOut, want)
	}
	if _, errOut, code := runOffline(args...); code != 2 || !strings.Contains(errOut, "charts/web/templates/cm.yaml") {
		t.Errorf("without --helm: exit %d, %s; want exit 2 naming the template read as YAML", code, errOut)
	}
}

// TestBuildHelmChartSkipsGitIgnored: a chart in a git work tree is read as a checkout would
// hold it: a git-ignored template (a build output under bin/) renders nothing.
func TestBuildHelmChartSkipsGitIgnored(t *testing.T) {
	repo := gitRepo(t, map[string]string{
		"chart/Chart.yaml":             "apiVersion: v2\nname: web\nversion: 0.1.0\n",
		"chart/templates/cm.yaml":      "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: tracked\n",
		"chart/templates/bin/gen.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ignored\n",
	})
	out, errOut, code := runOffline("build", filepath.Join(repo, "chart"))
	if code != 0 || !strings.Contains(out, "name: tracked") || strings.Contains(out, "name: ignored") {
		t.Errorf("exit %d, %q, stderr %s; want the tracked template only", code, out, errOut)
	}
}
