package sources

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// chartOptions renders a chart as release "demo" in namespace "apps", CRDs included.
func chartOptions(values map[string]any, kubeVersion string) RenderOptions {
	opts := DefaultRenderOptions()
	opts.Helm = &HelmOptions{Values: values, ReleaseName: "demo", Namespace: "apps", IncludeCRDs: true, KubeVersion: kubeVersion}
	return opts
}

// kindNames lists objects as "Kind namespace/name", in order.
func kindNames(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName())
	}
	return out
}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// TestHelmRenderChart renders the testdata chart (a subchart with a condition, a library
// chart, CRDs in crds/, hooks of every kind, Capabilities checks): values merge over the
// chart's and its subchart's, the CRD comes first, install and upgrade hooks are objects
// (pre before the chart's objects, post after, marked to be recreated rather than patched
// when an immutable field changes), test, delete and rollback hooks are dropped, NOTES.txt and .helmignore'd files are not objects, and each object names the
// template it came from.
func TestHelmRenderChart(t *testing.T) {
	src, err := filepath.Abs("testdata/charts")
	if err != nil {
		t.Fatal(err)
	}
	objs, origins, _, err := render(t.Context(), src, "app", chartOptions(map[string]any{
		"replicas": 3, "sub": map[string]any{"greeting": "bonjour"}}, "v1.31.0"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"CustomResourceDefinition /widgets.example.com",
		"ConfigMap apps/demo-pre-install",
		"ConfigMap apps/demo-sub",
		"Deployment apps/demo-web",
		"Widget apps/demo-widget",
		"ConfigMap apps/demo-post-upgrade",
	}
	if diff := cmp.Diff(want, kindNames(objs)); diff != "" {
		t.Errorf("objects (-want +got):\n%s", diff)
	}
	wantOrigins := []string{"app/crds/widgets.yaml", "app/templates/hooks.yaml", "app/charts/sub/templates/configmap.yaml",
		"app/templates/deployment.yaml", "app/templates/widget.yaml", "app/templates/hooks.yaml"}
	if diff := cmp.Diff(wantOrigins, origins); diff != "" {
		t.Errorf("origins (-want +got):\n%s", diff)
	}
	for _, o := range objs {
		_, hook := o.GetAnnotations()["helm.sh/hook"]
		if forced := o.GetAnnotations()[ForceAnnotation] == ForceEnabled; forced != hook {
			t.Errorf("%s %s: %s %t, want it on hooks only", o.GetKind(), o.GetName(), ForceAnnotation, forced)
		}
	}
	dep := find(objs, "Deployment", "demo-web")
	if dep == nil {
		t.Fatal("no Deployment")
	}
	if n, _, _ := unstructured.NestedInt64(dep.Object, "spec", "replicas"); n != 3 {
		t.Errorf("replicas %d, want 3 (the values given over values.yaml)", n)
	}
	wantLabels := map[string]string{"app.kubernetes.io/name": "app", "app.kubernetes.io/instance": "demo", "app.kubernetes.io/managed-by": "converge"}
	if diff := cmp.Diff(wantLabels, dep.GetLabels()); diff != "" {
		t.Errorf("labels from the library chart (-want +got):\n%s", diff)
	}
	cm := find(objs, "ConfigMap", "demo-sub")
	wantData := map[string]any{"greeting": "bonjour", "team": "platform", "chart": "sub"}
	if cm == nil || !cmp.Equal(wantData, cm.Object["data"]) {
		t.Errorf("subchart ConfigMap data: %v, want %v", cm, wantData)
	}
}

// TestHelmCapabilities: .Capabilities.KubeVersion and .Capabilities.APIVersions follow
// kubeVersion and apiVersions; the chart's own kubeVersion constraint is checked.
func TestHelmCapabilities(t *testing.T) {
	src, _ := filepath.Abs("testdata/charts")
	for _, tc := range []struct {
		name        string
		kubeVersion string
		apiVersions []string
		wantKube    string
		wantMonitor bool
		wantErr     string
	}{
		{name: "Helm's default Kubernetes version (v1.20.0)", wantKube: "old"},
		{name: "old kube", kubeVersion: "v1.28.3", wantKube: "old"},
		{name: "monitoring API", kubeVersion: "1.31.0", apiVersions: []string{"monitoring.coreos.com/v1/ServiceMonitor"}, wantKube: "recent", wantMonitor: true},
		{name: "below the chart's kubeVersion", kubeVersion: "v1.18.0",
			wantErr: "app/Chart.yaml: chart requires kubeVersion >=1.19.0-0, incompatible with v1.18.0 (set kubeVersion, or --kube-version)"},
		{name: "bad kubeVersion", kubeVersion: "one", wantErr: `app/Chart.yaml: kubeVersion "one": `},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := chartOptions(nil, "")
			opts.Helm.KubeVersion, opts.Helm.APIVersions = tc.kubeVersion, tc.apiVersions
			objs, err := Render(t.Context(), src, "app", opts)
			if tc.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) || !IsTerminal(err) {
					t.Fatalf("error %v, want a terminal error starting %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := find(objs, "Deployment", "demo-web").GetAnnotations()["example.com/kube"]; got != tc.wantKube {
				t.Errorf("semverCompare on KubeVersion: %q, want %q", got, tc.wantKube)
			}
			if got := find(objs, "ServiceMonitor", "demo-web") != nil; got != tc.wantMonitor {
				t.Errorf("ServiceMonitor rendered: %t, want %t", got, tc.wantMonitor)
			}
		})
	}
}

// TestHelmNoLookupNoDNS: lookup returns nothing and getHostByName resolves nothing, as
// `helm template` without --enable-dns; a URL fetched by no template function can be.
func TestHelmNoLookupNoDNS(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"c/Chart.yaml": "apiVersion: v2\nname: c\nversion: 1.0.0\n",
		"c/templates/cm.yaml": `apiVersion: v1
kind: ConfigMap
metadata:
  name: probe
data:
  lookup: {{ if lookup "v1" "Namespace" "" "kube-system" }}found{{ else }}absent{{ end }}
  host: {{ getHostByName "localhost" | quote }}
`})
	objs, err := Render(t.Context(), dir, "c", chartOptions(nil, ""))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"lookup": "absent", "host": ""}
	if diff := cmp.Diff(want, objs[0].Object["data"]); diff != "" {
		t.Errorf("data (-want +got):\n%s", diff)
	}
}

// TestHelmErrors: a chart's errors are terminal and name the file (and the line of a
// template), keeping Helm's own message.
func TestHelmErrors(t *testing.T) {
	chartYAML := "apiVersion: v2\nname: c\nversion: 1.0.0\n"
	cmHead := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string // a prefix of the error
		is    error
	}{
		{name: "undefined function", files: map[string]string{"c/templates/cm.yaml": cmHead + "data:\n  a: {{ nosuchfunc .Values.x }}\n"},
			want: `c/templates/cm.yaml:6: template: parse error at (c/templates/cm.yaml:6): function "nosuchfunc" not defined`},
		{name: "execution error", files: map[string]string{"c/templates/cm.yaml": cmHead + "data:\n\n  a: {{ .Values.a.b.c }}\n"},
			want: `c/templates/cm.yaml:7: template: c/templates/cm.yaml:7:15: executing "c/templates/cm.yaml" at <.Values.a.b.c>: nil pointer evaluating interface {}.b`},
		{name: "required value", files: map[string]string{"c/templates/cm.yaml": cmHead + "data:\n  a: {{ required \"tag is required\" .Values.tag }}\n"},
			want: `c/templates/cm.yaml:6: template: execution error at (c/templates/cm.yaml:6:8): tag is required`},
		{name: "not YAML", files: map[string]string{"c/templates/cm.yaml": "a: [\n"},
			want: `c/templates/cm.yaml: rendered manifests: YAML parse error on c/templates/cm.yaml`},
		{name: "not a chart", files: map[string]string{"c/Chart.yaml": "", "c/templates/cm.yaml": cmHead},
			want: `c/Chart.yaml: load chart: `},
		{name: "file too large", files: map[string]string{"c/templates/big.yaml": strings.Repeat("#", 2<<20)},
			want: "c/templates/big.yaml: file too large: 2097152 bytes, more than 1048576 (raise the limit with --max-file-size)", is: ErrFileTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{"c/Chart.yaml": chartYAML}
			for k, v := range tc.files {
				files[k] = v
			}
			opts := chartOptions(nil, "")
			opts.Limits.MaxFileSize = 1 << 20
			objs, err := Render(t.Context(), writeTree(t, files), "c", opts)
			if err == nil {
				t.Fatalf("rendered %v", kindNames(objs))
			}
			if !strings.HasPrefix(err.Error(), tc.want) || !IsTerminal(err) {
				t.Errorf("error:\n%v\nwant a terminal error starting:\n%s", err, tc.want)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error is not %v", tc.is)
			}
		})
	}
}

// TestHelmHostileTemplate: a template that loops to build a string of hundreds of MiB dies
// alone in its render child under the memory limit, naming the flag that raises it; the
// same chart with a small loop renders under the same limit.
func TestHelmHostileTemplate(t *testing.T) {
	tree := func(n int) string {
		return writeTree(t, map[string]string{
			"c/Chart.yaml": "apiVersion: v2\nname: c\nversion: 1.0.0\n",
			"c/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  a: \"{{ range until " +
				strconv.Itoa(n) + " }}0123456789{{ end }}\"\n"})
	}
	opts := chartOptions(nil, "")
	opts.Limits.MaxRenderMemory = 64 << 20
	if _, err := Render(t.Context(), tree(1000), "c", opts); err != nil {
		t.Fatalf("small loop: %v", err)
	}
	objs, err := Render(t.Context(), tree(100_000_000), "c", opts)
	if err == nil {
		t.Fatalf("rendered %v", kindNames(objs))
	}
	want := "c/Chart.yaml: render exceeded the memory limit of 64 MiB (raise it with --render-memory-limit)"
	if err.Error() != want || !errors.Is(err, ErrRenderMemory) || !IsTerminal(err) {
		t.Errorf("error:\n%v\nwant a terminal ErrRenderMemory:\n%s", err, want)
	}
}

// TestHelmTemplateStopsAtDeadline: a template that loops without allocating is stopped
// when the render's context ends (the daemon's --build-timeout), its child killed.
func TestHelmTemplateStopsAtDeadline(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"c/Chart.yaml":        "apiVersion: v2\nname: c\nversion: 1.0.0\n",
		"c/templates/cm.yaml": "{{ range until 100000 }}{{ range until 100000 }}{{ end }}{{ end }}apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	objs, err := Render(ctx, dir, "c", chartOptions(nil, ""))
	if err == nil {
		t.Fatalf("rendered %v", kindNames(objs))
	}
	if !errors.Is(err, context.DeadlineExceeded) || IsTerminal(err) || !strings.HasPrefix(err.Error(), "c/Chart.yaml: helm template stopped: ") {
		t.Errorf("error %v, want a transient deadline naming the chart", err)
	}
}

// TestHelmChartReach: a chart reads its own folder only: a symlink out of it (to a file
// elsewhere in the source, or outside the source) is refused, naming the link only; files
// of the source outside the chart are neither read nor counted.
func TestHelmChartReach(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret.yaml")
	if err := os.WriteFile(secret, []byte("apiVersion: v1\nkind: Secret\nmetadata:\n  name: stolen\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := map[string]string{
		"c/Chart.yaml":        "apiVersion: v2\nname: c\nversion: 1.0.0\n",
		"c/templates/cm.yaml": cm("x", "apps"),
		"other/big.yaml":      strings.Repeat("#", 3<<20), // over MaxFileSize, not in the chart
		"other/cm.yaml":       cm("other", "apps"),
	}
	for _, tc := range []struct{ name, link, target, want string }{
		{name: "out of the source", link: "c/templates/stolen.yaml", target: secret, want: "c/templates/stolen.yaml: symlink points outside the chart folder"},
		{name: "out of the chart", link: "c/templates/other.yaml", target: "../../other/cm.yaml", want: "c/templates/other.yaml: symlink points outside the chart folder"},
		{name: "values out of the chart", link: "c/values.yaml", target: "../other/cm.yaml", want: "c/values.yaml: symlink points outside the chart folder"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeTree(t, base)
			if err := os.Symlink(tc.target, filepath.Join(dir, filepath.FromSlash(tc.link))); err != nil {
				t.Fatal(err)
			}
			opts := chartOptions(nil, "")
			opts.Limits.MaxFileSize = 1 << 20
			objs, err := Render(t.Context(), dir, "c", opts)
			if err == nil {
				t.Fatalf("rendered %v", kindNames(objs))
			}
			if err.Error() != tc.want || !errors.Is(err, ErrPathEscape) || !IsTerminal(err) {
				t.Errorf("error:\n%v\nwant an ErrPathEscape:\n%s", err, tc.want)
			}
		})
	}
	opts := chartOptions(nil, "")
	opts.Limits.MaxFileSize = 1 << 20
	if objs, err := Render(t.Context(), writeTree(t, base), "c", opts); err != nil || len(objs) != 1 {
		t.Errorf("chart beside a large file: %v, %v", kindNames(objs), err)
	}
}

// TestHelmChartLimits: a chart over a file-count or total-size limit is refused naming
// the flag, before it is rendered.
func TestHelmChartLimits(t *testing.T) {
	files := map[string]string{"c/Chart.yaml": "apiVersion: v2\nname: c\nversion: 1.0.0\n"}
	for i := range 5 {
		files[fmt.Sprintf("c/templates/cm%d.yaml", i)] = cm(fmt.Sprintf("x%d", i), "apps")
	}
	dir := writeTree(t, files)
	for _, tc := range []struct {
		name   string
		limits Limits
		want   string
		is     error
	}{
		{name: "files", limits: Limits{MaxFiles: 3}, want: "c: too many files: more than 3 files (raise the limit with --max-files)", is: ErrTooManyFiles},
		{name: "total size", limits: Limits{MaxTotalSize: 200}, want: "c: source too large: more than 200 bytes read (raise the limit with --max-total-size)", is: ErrSourceTooLarge},
		{name: "objects", limits: Limits{MaxObjects: 4}, want: "c/Chart.yaml: too many objects: 5 objects, more than 4 (raise the limit with --max-objects)", is: ErrTooManyObjects},
		{name: "render output", limits: Limits{MaxRenderOutput: 300}, want: "c: render output too large: render children answered more than 300 bytes (raise the limit with --max-render-output)", is: ErrRenderOutput},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := chartOptions(nil, "")
			opts.Limits = tc.limits
			objs, err := Render(t.Context(), dir, "c", opts)
			if err == nil {
				t.Fatalf("rendered %v", kindNames(objs))
			}
			if err.Error() != tc.want || !errors.Is(err, tc.is) || !IsTerminal(err) {
				t.Errorf("error:\n%v\nwant:\n%s", err, tc.want)
			}
		})
	}
}

// tgz packs files (name → content) as a gzipped tar, as `helm package` writes a chart.
func tgz(t *testing.T, files map[string]string) string {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for name, content := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// TestHelmPackagedSubchartBounded: a vendored .tgz subchart is inflated within the limits:
// a 4 KB archive holding a 3 MiB file is refused naming --max-file-size, one inflating to
// more than the render may still read is refused naming --max-total-size, and a small one
// renders.
func TestHelmPackagedSubchartBounded(t *testing.T) {
	sub := func(extra map[string]string) string {
		files := map[string]string{"sub/Chart.yaml": "apiVersion: v2\nname: sub\nversion: 0.1.0\n", "sub/templates/cm.yaml": cm("sub", "apps")}
		for k, v := range extra {
			files[k] = v
		}
		return tgz(t, files)
	}
	for _, tc := range []struct {
		name   string
		tgz    string
		limits Limits
		want   string
		is     error
	}{
		{name: "small", tgz: sub(nil)},
		{name: "file over the limit", tgz: sub(map[string]string{"sub/templates/big.yaml": strings.Repeat("#", 3<<20)}), limits: Limits{MaxFileSize: 1 << 20},
			want: `c/Chart.yaml: load chart: file too large: error unpacking subchart sub-0.1.0.tgz in c: decompressed chart file "sub/templates/big.yaml" is larger than the maximum file size 1048576 (raise the limit with --max-file-size)`, is: ErrFileTooLarge},
		{name: "chart over the total", tgz: sub(map[string]string{"sub/a.txt": strings.Repeat("#", 1<<20), "sub/b.txt": strings.Repeat("#", 1<<20)}), limits: Limits{MaxFileSize: 1 << 20, MaxTotalSize: 1 << 20},
			want: "c/Chart.yaml: load chart: source too large: error unpacking subchart sub-0.1.0.tgz in c: decompressed chart is larger than the maximum file size", is: ErrSourceTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeTree(t, map[string]string{"c/Chart.yaml": "apiVersion: v2\nname: c\nversion: 1.0.0\ndependencies:\n  - name: sub\n    version: 0.1.0\n",
				"c/charts/sub-0.1.0.tgz": tc.tgz})
			opts := chartOptions(nil, "")
			opts.Limits = tc.limits
			objs, err := Render(t.Context(), dir, "c", opts)
			if tc.want == "" {
				if err != nil || len(objs) != 1 {
					t.Fatalf("rendered %v, %v; want the subchart's ConfigMap", kindNames(objs), err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) || !errors.Is(err, tc.is) || !IsTerminal(err) {
				t.Errorf("error:\n%v\nwant a terminal %v starting:\n%s", err, tc.is, tc.want)
			}
		})
	}
}
