package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// application is an Argo CD Application in namespace argocd with a git source at path app,
// the spec YAML extra merged in at the top of spec.
func application(t *testing.T, extra string) *unstructured.Unstructured {
	t.Helper()
	doc := "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {name: app, namespace: argocd}\nspec:\n" +
		"  source: {repoURL: https://git.example.com/apps.git, targetRevision: main, path: app}\n" +
		"  destination: {server: https://kubernetes.default.svc}\n" + extra
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

// skippedFields lists the fields of untranslated entries.
func skippedFields(us []untranslated) []string {
	var out []string
	for _, u := range us {
		out = append(out, u.Field)
	}
	return out
}

// TestMigrateArgoIgnoreDifferences: each ignoreDifferences entry becomes a spec.ignore rule
// (jsonPointers as paths, managedFieldsManagers as managers, group and kind globs and exact
// name and namespace as the target, an empty group as the core group); jqPathExpressions and
// a glob a target cannot express are reported naming the entry, and an entry left with
// nothing makes no rule; without RespectIgnoreDifferences=true a warning says Argo CD set the
// fields when it synced. A path that is not a JSON pointer is an error naming it.
func TestMigrateArgoIgnoreDifferences(t *testing.T) {
	app := application(t, `  syncPolicy: {syncOptions: [RespectIgnoreDifferences=true]}
  ignoreDifferences:
  - {group: apps, kind: Deployment, jsonPointers: [/spec/replicas]}
  - {kind: ConfigMap, name: web.config, namespace: prod, managedFieldsManagers: [kube-controller-manager, istio-sidecar]}
  - {group: "*.example.com", kind: "Widget?", jsonPointers: [/spec/size], jqPathExpressions: [".spec.items[]"]}
  - {group: apps, kind: StatefulSet, jqPathExpressions: [".spec.volumeClaimTemplates[].apiVersion"]}
  - {group: "[ab]pps", kind: Deployment, jsonPointers: [/spec/paused]}
`)
	m, err := translateApplication(app)
	if err != nil {
		t.Fatal(err)
	}
	want := []v1alpha1.IgnoreRule{
		{Paths: []string{"/spec/replicas"}, Target: &v1alpha1.PatchSelector{Group: "apps", Kind: "Deployment"}},
		{Managers: []string{"kube-controller-manager", "istio-sidecar"},
			Target: &v1alpha1.PatchSelector{Group: "^$", Kind: "ConfigMap", Name: `web\.config`, Namespace: "prod"}},
		{Paths: []string{"/spec/size"}, Target: &v1alpha1.PatchSelector{Group: `.*\.example\.com`, Kind: "Widget."}},
	}
	if m.Sync == nil {
		t.Fatalf("no Sync; not translated: %+v", m.NotTranslated)
	}
	if diff := cmp.Diff(want, m.Sync.Spec.Ignore); diff != "" {
		t.Errorf("spec.ignore (-want +got):\n%s", diff)
	}
	wantSkipped := []string{"spec.ignoreDifferences[2].jqPathExpressions", "spec.ignoreDifferences[3].jqPathExpressions", "spec.ignoreDifferences[4].group"}
	if diff := cmp.Diff(wantSkipped, skippedFields(m.NotTranslated)); diff != "" {
		t.Errorf("not translated (-want +got):\n%s", diff)
	}
	for _, w := range m.Warnings {
		if strings.Contains(w, "RespectIgnoreDifferences") {
			t.Errorf("warning %q with RespectIgnoreDifferences=true", w)
		}
	}

	m, err = translateApplication(application(t, "  ignoreDifferences: [{group: apps, kind: Deployment, jsonPointers: [/spec/replicas]}]\n"))
	if err != nil || len(m.Sync.Spec.Ignore) != 1 || !strings.Contains(strings.Join(m.Warnings, "\n"), "without RespectIgnoreDifferences=true") {
		t.Errorf("without RespectIgnoreDifferences: %v, rules %v, warnings %q", err, m.Sync.Spec.Ignore, m.Warnings)
	}
	_, err = translateApplication(application(t, "  ignoreDifferences: [{kind: Deployment, jsonPointers: [spec/replicas]}]\n"))
	if err == nil || !strings.Contains(err.Error(), "spec.ignoreDifferences[0].jsonPointers[0]") {
		t.Errorf("a path that is not a JSON pointer: %v, want an error naming it", err)
	}
}

// TestMigrateArgoKustomize: spec.source.kustomize's namePrefix, nameSuffix and images become
// the Sync's build fields (an image override parsed as kustomize edit set image does), and
// commonLabels its commonMetadata labels when they set only the objects' own labels
// (labelWithoutSelector); commonLabels that also set selectors, commonAnnotations (they also
// set pod template annotations), an image kustomize cannot read and the other options are
// reported naming the field.
func TestMigrateArgoKustomize(t *testing.T) {
	for _, tc := range []struct {
		name      string
		kustomize string
		want      v1alpha1.BuildFields
		skipped   []string
	}{
		{"names and images",
			`{namePrefix: prod-, nameSuffix: -v2, images: ["web=registry.example:5000/web:1.4.0", "db:16", "cache@sha256:abc", "api=*:2.0", "ui=ghcr.io/org/ui"]}`,
			v1alpha1.BuildFields{NamePrefix: "prod-", NameSuffix: "-v2", Images: []v1alpha1.KustomizeImage{
				{Name: "web", NewName: "registry.example:5000/web", NewTag: "1.4.0"},
				{Name: "db", NewTag: "16"},
				{Name: "cache", Digest: "sha256:abc"},
				{Name: "api", NewTag: "2.0"},
				{Name: "ui", NewName: "ghcr.io/org/ui"},
			}}, nil},
		{"labels without selector",
			`{commonLabels: {team: a}, labelWithoutSelector: true}`,
			v1alpha1.BuildFields{CommonMetadata: &v1alpha1.CommonMetadata{Labels: map[string]string{"team": "a"}}}, nil},
		{"labels with selectors, annotations, a bare image, other options",
			`{commonLabels: {team: a}, commonAnnotations: {owner: x}, images: [web], version: v5.4.0, replicas: [{name: web, count: 2}]}`,
			v1alpha1.BuildFields{},
			[]string{"spec.source.kustomize.images[0]", "spec.source.kustomize.commonLabels", "spec.source.kustomize.commonAnnotations",
				"spec.source.kustomize.replicas", "spec.source.kustomize.version"}},
		{"labels into templates",
			`{commonLabels: {team: a}, labelWithoutSelector: true, labelIncludeTemplates: true}`,
			v1alpha1.BuildFields{},
			[]string{"spec.source.kustomize.commonLabels", "spec.source.kustomize.labelIncludeTemplates", "spec.source.kustomize.labelWithoutSelector"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app := application(t, "")
			if err := unstructured.SetNestedField(app.Object, yamlValue(t, tc.kustomize), "spec", "source", "kustomize"); err != nil {
				t.Fatal(err)
			}
			m, err := translateApplication(app)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, m.Sync.Spec.BuildFields); diff != "" {
				t.Errorf("build fields (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.skipped, skippedFields(m.NotTranslated)); diff != "" {
				t.Errorf("not translated (-want +got):\n%s", diff)
			}
		})
	}
}

func yamlValue(t *testing.T, doc string) map[string]any {
	t.Helper()
	var v map[string]any
	if err := yaml.Unmarshal([]byte(doc), &v); err != nil {
		t.Fatal(err)
	}
	return v
}
