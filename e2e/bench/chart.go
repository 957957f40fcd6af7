package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/sources"
)

// The chart workload: a Helm chart whose templates render the tenant objects of a
// daemonWorkload (every tenant's Namespace and leaves; not the CRD, which the base Sync
// owns), object for object the same as the plain YAML files, so that a chart's figures
// compare with git's. The chart ranges over a values list, as charts that stamp out one
// object per entry do: per tenant its Namespace and, per kind, the indices of its leaves;
// named templates give the names; the Widgets come from a vendored subchart that reads the
// same list from global values.
const (
	// chartFolder is the chart's folder in the daemon mode's repository.
	chartFolder = "chart"
	// chartName and widgetsChart are the chart's and its subchart's names.
	chartName    = "bench"
	widgetsChart = "widgets"
	// chartSyncName is the Sync of the chart scenario; its name is the release name.
	chartSyncName = "bench-chart"
)

// chartValueKeys are the values keys of each leaf kind's indices in a tenant entry.
var chartValueKeys = map[string]string{"ConfigMap": "configMaps", "Secret": "secrets", "Service": "services",
	"Deployment": "deployments", "Widget": "widgets"}

// chartFiles are the chart's fixed files, by slash path under the chart folder.
var chartFiles = map[string]string{
	"Chart.yaml": "apiVersion: v2\nname: " + chartName + "\nversion: 1.0.0\n" +
		"description: the bench workload's tenant objects, one per entry of global.tenants\n" +
		"dependencies:\n  - name: " + widgetsChart + "\n    version: 1.0.0\n",
	"templates/_helpers.tpl": `{{/* bench.name: "<kind>-<index, 5 digits>" of (list kind index). */}}
{{- define "bench.name" -}}
{{ printf "%s-%05d" (index . 0) (int (index . 1)) }}
{{- end -}}
{{/* bench.annotations: the placement annotation, when global.placement is set. */}}
{{- define "bench.annotations" -}}
{{- with .Values.global.placement }}
annotations:
  bench.converge.dev/placement: {{ . | quote }}
{{- end }}
{{- end -}}
`,
	"templates/namespaces.yaml": `{{- range $t := .Values.global.tenants }}
---
apiVersion: v1
kind: Namespace
metadata:
  name: {{ $t.namespace }}
{{- end }}
`,
	"templates/configmaps.yaml": `{{- range $t := .Values.global.tenants }}
{{- range $i := $t.configMaps }}
{{- $name := include "bench.name" (list "configmap" $i) }}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ $name }}
  namespace: {{ $t.namespace }}
  labels:
    app: {{ $name }}
  {{- include "bench.annotations" $ | nindent 2 }}
data:
  key: value-{{ int $i }}
  config.yaml: "level: info\nreplicas: 3\nfeatures: [a, b, c]\n"
{{- end }}
{{- end }}
`,
	"templates/secrets.yaml": `{{- range $t := .Values.global.tenants }}
{{- range $i := $t.secrets }}
---
apiVersion: v1
kind: Secret
metadata:
  name: {{ include "bench.name" (list "secret" $i) }}
  namespace: {{ $t.namespace }}
  {{- include "bench.annotations" $ | nindent 2 }}
type: Opaque
data:
  key: {{ printf "secret-%d" (int $i) | b64enc }}
  user: {{ "bench" | b64enc }}
{{- end }}
{{- end }}
`,
	"templates/services.yaml": `{{- range $t := .Values.global.tenants }}
{{- range $i := $t.services }}
{{- $name := include "bench.name" (list "service" $i) }}
---
apiVersion: v1
kind: Service
metadata:
  name: {{ $name }}
  namespace: {{ $t.namespace }}
  {{- include "bench.annotations" $ | nindent 2 }}
spec:
  clusterIP: None
  selector:
    app: {{ $name }}
  ports:
    - name: http
      port: 80
      targetPort: 8080
{{- end }}
{{- end }}
`,
	"templates/deployments.yaml": `{{- range $t := .Values.global.tenants }}
{{- range $i := $t.deployments }}
{{- $name := include "bench.name" (list "deployment" $i) }}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ $name }}
  namespace: {{ $t.namespace }}
  {{- include "bench.annotations" $ | nindent 2 }}
spec:
  replicas: {{ $.Values.replicas }}
  selector:
    matchLabels:
      app: {{ $name }}
  template:
    metadata:
      labels:
        app: {{ $name }}
    spec:
      containers:
        - name: app
          image: {{ $.Values.image }}
          ports:
            - containerPort: 8080
          resources:
            requests:
              cpu: 100m
              memory: 64Mi
{{- end }}
{{- end }}
`,
	"charts/" + widgetsChart + "/Chart.yaml": "apiVersion: v2\nname: " + widgetsChart + "\nversion: 1.0.0\n" +
		"description: the Widgets of global.tenants\n",
	"charts/" + widgetsChart + "/values.yaml": "color: blue\n",
	"charts/" + widgetsChart + "/templates/widgets.yaml": `{{- range $t := .Values.global.tenants }}
{{- range $i := $t.widgets }}
---
apiVersion: ` + benchGroup + `/v1
kind: Widget
metadata:
  name: {{ printf "widget-%05d" (int $i) }}
  namespace: {{ $t.namespace }}
  {{- with $.Values.global.placement }}
  annotations:
    bench.converge.dev/placement: {{ . | quote }}
  {{- end }}
spec:
  size: {{ add (mod (int $i) 7) 1 }}
  color: {{ $.Values.color }}
{{- end }}
{{- end }}
`,
}

// chartValues returns the chart's values.yaml for w: per tenant its Namespace's name and,
// per leaf kind, the indices of its leaves (the number in the leaf's name), and with
// parity the placement annotation's value.
func chartValues(w daemonWorkload, parity bool) ([]byte, error) {
	tenants := make([]map[string]any, len(w.Tenants))
	for t, objs := range w.Tenants {
		entry := map[string]any{}
		for _, u := range objs {
			if u.GetKind() == "Namespace" {
				entry["namespace"] = u.GetName()
				continue
			}
			key, ok := chartValueKeys[u.GetKind()]
			_, num, found := strings.Cut(u.GetName(), "-")
			var i int
			if _, err := fmt.Sscanf(num, "%d", &i); !ok || !found || err != nil {
				return nil, fmt.Errorf("%s: not a leaf the chart can render", keyOf(u))
			}
			idx, _ := entry[key].([]int)
			entry[key] = append(idx, i)
		}
		tenants[t] = entry
	}
	global := map[string]any{"tenants": tenants}
	if parity {
		global["placement"] = "${" + parityTierVar + "}-${" + parityRegionVar + "}"
	}
	return yaml.Marshal(map[string]any{"replicas": 2, "image": "registry.example/app:1.2.3", "global": global})
}

// writeChart writes the chart of w's tenant objects into folder.
func writeChart(folder string, w daemonWorkload, parity bool) error {
	values, err := chartValues(w, parity)
	if err != nil {
		return err
	}
	files := map[string][]byte{"values.yaml": values}
	for name, content := range chartFiles {
		files[name] = []byte(content)
	}
	for name, content := range files {
		p := filepath.Join(folder, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, content, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// chartRenderOptions are the chart's render options as the daemon gives them for a Sync of
// syncNamespace named chartSyncName without spec.source.helm fields set.
func chartRenderOptions() *sources.HelmOptions {
	return &sources.HelmOptions{ReleaseName: chartSyncName, Namespace: syncNamespace, IncludeCRDs: true}
}

// renderChart renders the chart folder of dir as a Sync of the daemon mode would.
func renderChart(ctx context.Context, dir string) ([]*unstructured.Unstructured, error) {
	opts := sources.DefaultRenderOptions()
	opts.Helm = chartRenderOptions()
	return sources.Render(ctx, dir, chartFolder, opts)
}
