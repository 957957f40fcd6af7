package sources

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// manifest returns the i-th generated object: a ConfigMap, Service, Deployment or Secret in
// one of ten namespaces.
func manifest(i int) string {
	ns := fmt.Sprintf("team-%d", i%10)
	name := fmt.Sprintf("obj-%05d", i)
	switch i % 4 {
	case 0:
		return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  namespace: %s\n  labels: {app: %s}\ndata:\n  key: value-%d\n  config.yaml: |\n    level: info\n    replicas: 3\n", name, ns, name, i)
	case 1:
		return fmt.Sprintf("apiVersion: v1\nkind: Service\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n  selector: {app: %s}\n  ports:\n  - {name: http, port: 80, targetPort: 8080}\n", name, ns, name)
	case 2:
		return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: %[1]s
  namespace: %[2]s
spec:
  replicas: 2
  selector:
    matchLabels: {app: %[1]s}
  template:
    metadata:
      labels: {app: %[1]s}
    spec:
      containers:
      - name: app
        image: registry.example/app:1.2.3
        ports: [{containerPort: 8080}]
        resources:
          requests: {cpu: 100m, memory: 64Mi}
`, name, ns)
	default:
		return fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata:\n  name: %s\n  namespace: %s\ntype: Opaque\nstringData:\n  password: p-%d\n", name, ns, i)
	}
}

// writeManifests writes n objects, ten per file, into one folder per namespace and returns
// the file names relative to dir.
func writeManifests(b *testing.B, dir string, n int) []string {
	b.Helper()
	var files []string
	for start := 0; start < n; start += 10 {
		var docs []string
		for i := start; i < min(start+10, n); i++ {
			docs = append(docs, manifest(i))
		}
		name := fmt.Sprintf("team-%d/objects-%05d.yaml", start/10%10, start)
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(strings.Join(docs, "---\n")), 0o644); err != nil {
			b.Fatal(err)
		}
		files = append(files, name)
	}
	return files
}

func benchmarkRender(b *testing.B, n int, kustomize bool) {
	dir := b.TempDir()
	files := writeManifests(b, dir, n)
	if kustomize {
		k := "resources:\n- " + strings.Join(files, "\n- ") + "\nlabels:\n- pairs: {owner: bench}\n"
		if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		objs, err := Render(b.Context(), dir, ".", DefaultRenderOptions())
		if err != nil {
			b.Fatal(err)
		}
		if len(objs) != n {
			b.Fatalf("rendered %d objects, want %d", len(objs), n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/object")
}

func BenchmarkRenderPlain1000(b *testing.B)     { benchmarkRender(b, 1000, false) }
func BenchmarkRenderPlain10000(b *testing.B)    { benchmarkRender(b, 10000, false) }
func BenchmarkRenderKustomize1000(b *testing.B) { benchmarkRender(b, 1000, true) }

// benchmarkRenderApps renders a plain folder of apps folders, each its own kustomization
// of perApp objects. Each kustomize build copies only what its kustomization reaches
// (reach.go), so the bytes read grow with the source size, not apps × source size.
func benchmarkRenderApps(b *testing.B, apps, perApp int) {
	dir := b.TempDir()
	for a := range apps {
		app := fmt.Sprintf("app-%03d", a)
		var docs []string
		for i := range perApp {
			docs = append(docs, manifest(a*perApp+i))
		}
		files := map[string]string{
			"objects.yaml":       strings.Join(docs, "---\n"),
			"kustomization.yaml": "resources: [objects.yaml]\nlabels:\n- pairs: {owner: bench}\n",
		}
		for name, content := range files {
			path := filepath.Join(dir, app, name)
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	opts := DefaultRenderOptions()
	opts.Limits.MaxTotalSize = 1 << 40 // measure the copies, not the limit
	b.ResetTimer()
	for b.Loop() {
		objs, err := Render(b.Context(), dir, ".", opts)
		if err != nil {
			b.Fatal(err)
		}
		if len(objs) != apps*perApp {
			b.Fatalf("rendered %d objects, want %d", len(objs), apps*perApp)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(apps*perApp), "ns/object")
}

func BenchmarkRenderApps50x20(b *testing.B)  { benchmarkRenderApps(b, 50, 20) }
func BenchmarkRenderApps200x20(b *testing.B) { benchmarkRenderApps(b, 200, 20) }

func BenchmarkRenderKustomize10000(b *testing.B) { benchmarkRender(b, 10000, true) }

// benchmarkRenderChart renders a Helm chart of n objects in its render child: 100
// templates, each a range over values emitting n/100 objects of manifest's four kinds, with
// a helper from _helpers.tpl and the release's name and namespace; then prs, if any.
func benchmarkRenderChart(b *testing.B, n int, prs ...PostRenderer) {
	dir := b.TempDir()
	files := map[string]string{
		"chart/Chart.yaml":             "apiVersion: v2\nname: bench\nversion: 1.0.0\n",
		"chart/values.yaml":            fmt.Sprintf("perTemplate: %d\nimage: registry.example/app:1.2.3\n", n/100),
		"chart/templates/_helpers.tpl": "{{- define \"bench.labels\" -}}\napp.kubernetes.io/instance: {{ .Release.Name }}\nowner: bench\n{{- end -}}\n",
	}
	for t := range 100 {
		files[fmt.Sprintf("chart/templates/t%03d.yaml", t)] = fmt.Sprintf(`{{- range $i := until (int .Values.perTemplate) }}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ $.Release.Name }}-%03d-{{ $i }}
  namespace: {{ $.Release.Namespace }}
  labels:
    {{- include "bench.labels" $ | nindent 4 }}
data:
  image: {{ $.Values.image | quote }}
  index: "{{ $i }}"
  config.yaml: |
    level: info
    replicas: 3
{{- end }}
`, t)
	}
	for name, content := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	opts := DefaultRenderOptions()
	opts.Helm = &HelmOptions{ReleaseName: "bench", Namespace: "apps", PostRenderers: prs}
	b.ResetTimer()
	for b.Loop() {
		objs, err := Render(b.Context(), dir, "chart", opts)
		if err != nil {
			b.Fatal(err)
		}
		if len(objs) != n {
			b.Fatalf("rendered %d objects, want %d", len(objs), n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/object")
}

func BenchmarkRenderHelmChart1000(b *testing.B)  { benchmarkRenderChart(b, 1000) }
func BenchmarkRenderHelmChart10000(b *testing.B) { benchmarkRenderChart(b, 10000) }

// benchPostRenderer patches every object (a JSON6902 patch selected by kind and label), one
// by name (a strategic merge patch), and overrides an image no object uses.
var benchPostRenderer = PostRenderer{Kustomize: &KustomizePostRenderer{
	Patches: []Patch{
		{Patch: "- {op: add, path: /metadata/labels/patched, value: \"yes\"}", Target: &PatchTarget{Kind: "ConfigMap", LabelSelector: "owner=bench"}},
		{Patch: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bench-000-0, namespace: apps}\ndata: {extra: x}\n"},
	},
	Images: []Image{{Name: "nginx", NewTag: "1.27"}},
}}

func BenchmarkRenderHelmChartPostRender1000(b *testing.B) {
	benchmarkRenderChart(b, 1000, benchPostRenderer)
}

func BenchmarkRenderHelmChartPostRender10000(b *testing.B) {
	benchmarkRenderChart(b, 10000, benchPostRenderer)
}
