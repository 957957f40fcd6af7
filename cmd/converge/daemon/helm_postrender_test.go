package daemon

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// webChart renders a ConfigMap and a Deployment of image nginx:1.27.
var webChart = map[string]string{
	"Chart.yaml":        "apiVersion: v2\nname: web\nversion: 0.1.0\n",
	"templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-settings\ndata:\n  mode: chart\n",
	"templates/deploy.yaml": `apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}-web
spec:
  replicas: 1
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
        - name: web
          image: nginx:1.27
`,
}

// TestDaemonHelmPostRenderers: a chart's objects are applied as its post-renderers leave
// them: a strategic merge patch and a JSON6902 patch selected by kind and name, an image
// override. A patch that fails is a terminal BuildFailed naming it by its Sync field;
// nothing is applied or pruned, though the patch before it would drop an object (I8).
func TestDaemonHelmPostRenderers(t *testing.T) {
	f := newFixture(t)
	rev := f.publish(webChart)
	f.startDaemon(env.Config)
	patches := []v1alpha1.KustomizePatch{
		{Patch: "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: any\n  labels: {tier: frontend}\nspec:\n  replicas: 3\n",
			Target: &v1alpha1.PatchSelector{Kind: "Deployment", Name: "app-web"}},
		{Patch: `[{"op": "add", "path": "/data/extra", "value": "patched"}]`, Target: &v1alpha1.PatchSelector{Kind: "ConfigMap", Name: "app-settings"}},
	}
	f.createSync(time.Hour, func(s *v1alpha1.Sync) {
		s.Spec.Wait = false // no Deployment controller runs here
		s.Spec.Source.Helm = &v1alpha1.HelmSource{PostRenderers: []v1alpha1.PostRenderer{{Kustomize: &v1alpha1.KustomizePostRenderer{
			Patches: patches,
			Images:  []v1alpha1.KustomizeImage{{Name: "nginx", NewName: "registry.example.com/nginx", Digest: "sha256:" + strings.Repeat("a", 64)}},
		}}}}
	})
	f.waitSync("Ready", readyAt(rev))
	dep := &appsv1.Deployment{}
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "app-web"}, dep); err != nil {
		t.Fatal(err)
	}
	wantImage := "registry.example.com/nginx@sha256:" + strings.Repeat("a", 64)
	if *dep.Spec.Replicas != 3 || dep.Labels["tier"] != "frontend" || dep.Spec.Template.Spec.Containers[0].Image != wantImage {
		t.Errorf("Deployment: replicas %d, labels %v, image %s; want 3, tier=frontend, %s",
			*dep.Spec.Replicas, dep.Labels, dep.Spec.Template.Spec.Containers[0].Image, wantImage)
	}
	f.waitData("app-settings", map[string]string{"mode": "chart", "extra": "patched"})

	f.updateSync("app", func(s *v1alpha1.Sync) {
		k := s.Spec.Source.Helm.PostRenderers[0].Kustomize
		k.Patches = append(k.Patches,
			v1alpha1.KustomizePatch{Patch: "$patch: delete\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app-settings\n"},
			v1alpha1.KustomizePatch{Patch: "- op: replace\n  path: /spec/nothing/here\n  value: 1\n", Target: &v1alpha1.PatchSelector{Kind: "Deployment"}})
	})
	c := f.failedWith(reasonBuildFailed)
	want := "spec.source.helm.postRenderers[0].kustomize.patches[3]: "
	if !strings.HasPrefix(c.Message, want) {
		t.Errorf("message %q, want it to start %q", c.Message, want)
	}
	s := f.waitSync("Stalled", func(s *v1alpha1.Sync) bool {
		return meta.IsStatusConditionTrue(s.Status.Conditions, v1alpha1.ConditionStalled)
	})
	if s.Status.LastAppliedRevision != rev {
		t.Errorf("lastAppliedRevision %q, want %q", s.Status.LastAppliedRevision, rev)
	}
	if cm, err := f.configMap("app-settings"); err != nil || cm.Data["extra"] != "patched" {
		t.Errorf("app-settings after the failed post-render: %v, %v; want it kept", cm.Data, err)
	}
}
