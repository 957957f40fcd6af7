package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/converge-dev/converge/e2e/chartrepo"
	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/e2e/registry"
)

// cliChart is a chart whose ConfigMap carries its version and a value.
func cliChart(t *testing.T, version string) string {
	return chartrepo.WriteChart(t, map[string]string{
		"Chart.yaml":  "apiVersion: v2\nname: web\nversion: " + version + "\n",
		"values.yaml": "greeting: hi\n",
		"templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-cm\n" +
			"data:\n  chart: {{ .Chart.Version | quote }}\n  greeting: {{ .Values.greeting | quote }}\n",
	})
}

// TestBuildChartFromRepository: `converge build CHART --repo URL --version` renders the
// highest matching version of an HTTP repository's chart (credentials from the
// environment, release name the chart's, --set over its values), and `converge build
// oci://host/path/CHART --version` one pushed with helm push; a version nothing matches
// and a wrong password exit 2 naming the chart.
func TestBuildChartFromRepository(t *testing.T) {
	repo := chartrepo.Start(t, chartrepo.Options{Username: "ci", Password: "pw"})
	repo.Add(t, cliChart(t, "1.0.0"), "")
	repo.Add(t, cliChart(t, "1.1.0"), "")
	cache := []string{"--git-cache-dir", filepath.Join(t.TempDir(), "cache")}
	t.Setenv("CONVERGE_HELM_USERNAME", "ci")
	t.Setenv("CONVERGE_HELM_PASSWORD", "pw")
	out, errOut, code := runOffline(append([]string{"build", "web", "--repo", repo.URL, "--version", "1.x", "--set", "greeting=hello"}, cache...)...)
	if code != 0 || !strings.Contains(out, "name: web-cm") || !strings.Contains(out, `chart: 1.1.0`) || !strings.Contains(out, "greeting: hello") {
		t.Fatalf("build from the repository: exit %d, out %q, err %s", code, out, errOut)
	}
	_, errOut, code = runOffline(append([]string{"build", "web", "--repo", repo.URL, "--version", ">=2"}, cache...)...)
	if code != 2 || !strings.Contains(errOut, "chart web >=2") || !strings.Contains(errOut, "no version") {
		t.Errorf("no matching version: exit %d, error %q", code, errOut)
	}
	t.Setenv("CONVERGE_HELM_PASSWORD", "wrong")
	_, errOut, code = runOffline(append([]string{"build", "web", "--repo", repo.URL}, cache...)...)
	if code != 2 || !strings.Contains(errOut, "refused the credentials") {
		t.Errorf("wrong password: exit %d, error %q", code, errOut)
	}

	reg := registry.Start(t, registry.Options{})
	reg.PushChart(t, "charts", "web", "2.0.0", chartrepo.Package(t, cliChart(t, "2.0.0"), ""))
	out, errOut, code = runOffline(append([]string{"build", "oci://" + reg.Host + "/charts/web", "--version", "2.0.0", "--insecure-registry"}, cache...)...)
	if code != 0 || !strings.Contains(out, `chart: 2.0.0`) {
		t.Fatalf("build from the registry: exit %d, out %q, err %s", code, out, errOut)
	}
}

// TestApplyCLIChartDryRunDiff: `converge apply CHART --repo --version` applies a chart, and
// a dry-run of the next version shows the change as a diff, so CI can review a chart
// upgrade against the cluster.
func TestApplyCLIChartDryRunDiff(t *testing.T) {
	cluster.Require(t, env)
	ns := env.Namespace(t)
	repo := chartrepo.Start(t, chartrepo.Options{})
	repo.Add(t, cliChart(t, "1.0.0"), "")
	repo.Add(t, cliChart(t, "1.1.0"), "")
	kube := []string{"-n", ns, "--inventory=" + ns + "/web", "--git-cache-dir", filepath.Join(t.TempDir(), "cache")}
	if out, code := cli(t, append([]string{"apply", "web", "--repo", repo.URL, "--version", "1.0.0"}, kube...)...); code != 0 {
		t.Fatalf("apply 1.0.0: exit %d\n%s", code, out)
	}
	if out, code := cli(t, append([]string{"apply", "web", "--repo", repo.URL, "--version", "1.0.0", "--dry-run"}, kube...)...); code != 0 {
		t.Errorf("dry-run of the applied version: exit %d, want 0 (nothing to do)\n%s", code, out)
	}
	out, code := cli(t, append([]string{"apply", "web", "--repo", repo.URL, "--version", "1.1.0", "--dry-run", "--diff"}, kube...)...)
	if code != 1 || !strings.Contains(out, "1.1.0") || !strings.Contains(out, "web-cm") {
		t.Errorf("dry-run of 1.1.0: exit %d, want 1 and a diff of web-cm naming 1.1.0\n%s", code, out)
	}
}
