package sources

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/e2e/gotool"
)

// helmBinary returns the helm program of the Helm module version this module builds with,
// built from the module proxy once (e2e/gotool).
func helmBinary(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "helm.sh/helm/v3").Output()
	version := strings.TrimSpace(string(out))
	if err != nil || version == "" {
		gotool.Unavailable(t, "the Helm module version: go list: %v", err)
	}
	return gotool.Binary(t, "helm", "helm.sh/helm/v3/cmd/helm", version)
}

// helmObjects decodes `helm template` output into canonical JSON objects, leaving out the
// hooks Converge drops (see keepHook): those that fire on none of install and upgrade; the
// hooks kept carry ForceAnnotation.
func helmObjects(t *testing.T, out []byte) []string {
	t.Helper()
	var objs []string
	for _, d := range splitDocuments(out) {
		js, err := yaml.YAMLToJSON(d.data)
		if err != nil {
			t.Fatalf("helm output: %v\n%s", err, d.data)
		}
		var obj map[string]any
		if err := utiljson.Unmarshal(js, &obj); err != nil {
			t.Fatal(err)
		}
		if obj == nil {
			continue
		}
		meta, _ := obj["metadata"].(map[string]any)
		ann, _ := meta["annotations"].(map[string]any)
		if hook, ok := ann["helm.sh/hook"].(string); ok {
			kept := false
			for _, e := range strings.Split(hook, ",") {
				kept = kept || slices.Contains([]string{"pre-install", "post-install", "pre-upgrade", "post-upgrade"}, strings.TrimSpace(e))
			}
			if !kept {
				continue
			}
			ann[ForceAnnotation] = ForceEnabled // recreated, not patched, as Helm creates hooks anew
		}
		objs = append(objs, objectJSON(t, obj))
	}
	slices.Sort(objs)
	return objs
}

func objectJSON(t *testing.T, obj map[string]any) string {
	t.Helper()
	js, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return string(js)
}

// TestHelmTemplateSameObjects renders the testdata chart with `helm template` (the real
// program, of the same Helm version) and with Converge, for several values, Kubernetes
// versions and API versions, with its subchart vendored as a folder and as a packaged
// .tgz: both give the same objects, whole, except the hooks Converge drops (test, delete,
// rollback), which helm prints, and ForceAnnotation on the hooks it keeps.
func TestHelmTemplateSameObjects(t *testing.T) {
	helm := helmBinary(t)
	for _, tc := range []struct {
		name        string
		tgz         bool
		values      string
		kubeVersion string
		apiVersions []string
	}{
		{name: "defaults", kubeVersion: "v1.20.0"},
		{name: "values and capabilities", values: "replicas: 4\nsub:\n  greeting: hallo\nglobal:\n  team: data\n",
			kubeVersion: "v1.33.2", apiVersions: []string{"monitoring.coreos.com/v1/ServiceMonitor"}},
		{name: "subchart disabled", values: "sub:\n  enabled: false\n", kubeVersion: "v1.31.0"},
		{name: "subchart as .tgz", tgz: true, values: "sub:\n  greeting: packaged\n", kubeVersion: "v1.31.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := t.TempDir()
			if err := os.CopyFS(src, os.DirFS("testdata/charts")); err != nil {
				t.Fatal(err)
			}
			chart := filepath.Join(src, "app")
			if tc.tgz {
				sub := filepath.Join(chart, "charts", "sub")
				if out, err := exec.Command(helm, "package", sub, "-d", filepath.Join(chart, "charts")).CombinedOutput(); err != nil {
					t.Fatalf("helm package: %v\n%s", err, out)
				}
				if err := os.RemoveAll(sub); err != nil {
					t.Fatal(err)
				}
			}
			valuesFile := filepath.Join(t.TempDir(), "values.yaml")
			if err := os.WriteFile(valuesFile, []byte(tc.values), 0o644); err != nil {
				t.Fatal(err)
			}
			args := []string{"template", "demo", chart, "--namespace", "apps", "--include-crds", "--kube-version", tc.kubeVersion, "-f", valuesFile}
			for _, v := range tc.apiVersions {
				args = append(args, "--api-versions", v)
			}
			cmd := exec.Command(helm, args...)
			cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, stderr.String())
			}
			want := helmObjects(t, out)

			var values map[string]any
			if err := yaml.Unmarshal([]byte(tc.values), &values); err != nil {
				t.Fatal(err)
			}
			opts := chartOptions(values, tc.kubeVersion)
			opts.Helm.APIVersions = tc.apiVersions
			objs, err := Render(t.Context(), src, "app", opts)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, o := range objs {
				got = append(got, objectJSON(t, o.Object))
			}
			slices.Sort(got)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("helm template (-) and Converge (+) differ:\n%s", diff)
			}
			if len(got) < 5 {
				t.Errorf("only %d objects: the comparison proves little", len(got))
			}
		})
	}
}
