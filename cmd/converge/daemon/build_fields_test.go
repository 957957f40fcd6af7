package daemon

import (
	"context"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/cmd/converge/internal/synctest"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// buildFieldsRepo holds a base, a component, a kustomization writing every build field by
// hand (hand/) and one that only lists the base (inline/), for the Sync's own fields.
var buildFieldsRepo = map[string]string{
	"base/kustomization.yaml": "resources: [job.yaml, settings.yaml]\nimages:\n- {name: busybox, newName: registry.example/busybox, newTag: \"1.0\"}\n",
	"base/settings.yaml":      "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: NS}\ndata: {k: v}\n",
	"base/job.yaml": `apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly, namespace: NS, labels: {app: nightly}}
spec:
  schedule: "0 3 * * *"
  suspend: true
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          containers: [{name: main, image: "busybox:1.0"}, {name: side, image: "alpine:3.20"}]
`,
	"comp/kustomization.yaml":   "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\npatches:\n- patch: '[{\"op\": \"add\", \"path\": \"/data/fromComponent\", \"value\": \"yes\"}]'\n  target: {kind: ConfigMap}\n",
	"inline/kustomization.yaml": "resources: [../base]\n",
	"hand/kustomization.yaml": `resources: [../base]
namePrefix: pre-
nameSuffix: -suf
components: [../comp]
patches:
- target: {kind: CronJob, labelSelector: app=nightly}
  patch: |
    apiVersion: batch/v1
    kind: CronJob
    metadata: {name: any}
    spec: {schedule: "0 4 * * *"}
- target: {kind: ConfigMap, name: settings}
  patch: '[{"op": "add", "path": "/data/patched", "value": "yes"}]'
- target: {kind: Secret}
  patch: '[{"op": "add", "path": "/data/x", "value": "y"}]'
images:
- {name: registry.example/busybox, newTag: "1.27"}
- {name: alpine, newName: mirror.example/alpine}
`,
}

// withBuildFields sets on the Sync what hand/kustomization.yaml writes, and common metadata.
func withBuildFields(s *v1alpha1.Sync) {
	s.Spec.Path = "inline"
	s.Spec.BuildFields = v1alpha1.BuildFields{
		NamePrefix: "pre-", NameSuffix: "-suf", Components: []string{"../comp"},
		Patches: []v1alpha1.KustomizePatch{
			{Patch: "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: any}\nspec: {schedule: \"0 4 * * *\"}\n",
				Target: &v1alpha1.PatchSelector{Kind: "CronJob", LabelSelector: "app=nightly"}},
			{Patch: `[{"op": "add", "path": "/data/patched", "value": "yes"}]`, Target: &v1alpha1.PatchSelector{Kind: "ConfigMap", Name: "settings"}},
			{Patch: `[{"op": "add", "path": "/data/x", "value": "y"}]`, Target: &v1alpha1.PatchSelector{Kind: "Secret"}},
		},
		Images:         []v1alpha1.KustomizeImage{{Name: "registry.example/busybox", NewTag: "1.27"}, {Name: "alpine", NewName: "mirror.example/alpine"}},
		CommonMetadata: &v1alpha1.CommonMetadata{Labels: map[string]string{"team": "platform"}, Annotations: map[string]string{"owner": "ops"}},
	}
}

// TestDaemonBuildFieldsRenderAsHandWritten: a Sync applies the hand-written kustomization,
// then the same base through its own inline fields: the objects keep their names (none
// created, none pruned) and their content, and carry the common metadata besides. Without
// the fields the second render named the objects settings and nightly, created them and
// pruned pre-settings-suf and pre-nightly-suf.
func TestDaemonBuildFieldsRenderAsHandWritten(t *testing.T) {
	f := newFixture(t)
	rev := f.publish(buildFieldsRepo)
	f.startDaemon(env.Config)
	f.createSync(0, func(s *v1alpha1.Sync) { s.Spec.Path = "hand" })
	f.waitSync("Ready with the hand-written kustomization", readyAt(rev))
	handCM, handJob := f.buildFieldsObjects()
	f.updateSync("app", withBuildFields)
	s := f.waitSync("Ready with the inline fields", func(s *v1alpha1.Sync) bool {
		return readyAt(rev)(s) && s.Status.ObservedGeneration == s.Generation && s.Generation > 1
	})
	if sum := s.Status.Summary; sum == nil || sum.Created != 0 || sum.Pruned != 0 {
		t.Errorf("summary %+v: the inline fields rendered other objects than the hand-written kustomization", sum)
	}
	cm, job := f.buildFieldsObjects()
	if !equality.Semantic.DeepEqual(handCM.Data, cm.Data) || cm.Data["patched"] != "yes" || cm.Data["fromComponent"] != "yes" {
		t.Errorf("ConfigMap data: hand-written %v, inline %v", handCM.Data, cm.Data)
	}
	if !equality.Semantic.DeepEqual(handJob.Spec, job.Spec) {
		t.Errorf("CronJob spec differs:\nhand-written %+v\ninline       %+v", handJob.Spec, job.Spec)
	}
	containers := job.Spec.JobTemplate.Spec.Template.Spec.Containers
	if containers[0].Image != "registry.example/busybox:1.27" || containers[1].Image != "mirror.example/alpine:3.20" || job.Spec.Schedule != "0 4 * * *" {
		t.Errorf("CronJob: images %s %s, schedule %q", containers[0].Image, containers[1].Image, job.Spec.Schedule)
	}
	for _, o := range []client.Object{cm, job} {
		if o.GetLabels()["team"] != "platform" || o.GetAnnotations()["owner"] != "ops" {
			t.Errorf("%s: common metadata missing: labels %v annotations %v", o.GetName(), o.GetLabels(), o.GetAnnotations())
		}
	}
}

// buildFieldsObjects reads the objects of buildFieldsRepo as the build fields name them.
func (f *fixture) buildFieldsObjects() (*corev1.ConfigMap, *batchv1.CronJob) {
	f.t.Helper()
	cm, err := f.configMap("pre-settings-suf")
	if err != nil {
		f.t.Fatal(err)
	}
	job := &batchv1.CronJob{}
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "pre-nightly-suf"}, job); err != nil {
		f.t.Fatal(err)
	}
	return cm, job
}

// TestDaemonBuildFieldsBadInputKeepsState: a malformed patch, or a component out of the
// source, makes the Sync Ready=False BuildFailed naming the field, while a new revision
// that drops an object waits: nothing is pruned (I8).
func TestDaemonBuildFieldsBadInputKeepsState(t *testing.T) {
	f := newFixture(t)
	rev := f.publish(map[string]string{"app/kustomization.yaml": "resources: [a.yaml, b.yaml]\n",
		"app/a.yaml": cmNamed("a", "NS"), "app/b.yaml": cmNamed("b", "NS")})
	f.startDaemon(env.Config)
	f.createSync(0, func(s *v1alpha1.Sync) { s.Spec.Path = "app" })
	f.waitSync("Ready", readyAt(rev))
	f.publish(map[string]string{"app/kustomization.yaml": "resources: [a.yaml]\n", "app/b.yaml": ""})
	good := v1alpha1.KustomizePatch{Patch: `[{"op": "add", "path": "/data/p", "value": "q"}]`, Target: &v1alpha1.PatchSelector{Kind: "ConfigMap"}}
	for _, c := range []struct {
		field  string
		fields v1alpha1.BuildFields
	}{
		{"spec.patches[1]", v1alpha1.BuildFields{Patches: []v1alpha1.KustomizePatch{good, {Patch: "kind: ConfigMap\nmetadata: {name: [\n", Target: good.Target}}}},
		{"spec.components[0]", v1alpha1.BuildFields{Components: []string{"../../etc"}}},
		{"spec.components[1]", v1alpha1.BuildFields{Components: []string{"../app", "/etc"}}},
	} {
		f.updateSync("app", func(s *v1alpha1.Sync) { s.Spec.BuildFields = c.fields })
		cond := f.failedWith(reasonBuildFailed)
		if !strings.Contains(cond.Message, c.field) {
			t.Errorf("message %q does not name %s", cond.Message, c.field)
		}
		if _, err := f.configMap("b"); err != nil {
			t.Fatalf("with a bad %s, ConfigMap b (dropped by the new revision) was pruned: %v", c.field, err)
		}
	}
}

// TestSyncBuildFieldsRefusedOnChart: the API server refuses the build fields on a Helm
// chart source, pointing at postRenderers.
func TestSyncBuildFieldsRefusedOnChart(t *testing.T) {
	f := newFixture(t)
	f.startDaemon(env.Config) // installs the CRD
	s := synctest.NewSync(f.ns, f.git.RepoURL("app"), 0, func(s *v1alpha1.Sync) {
		s.Spec.Source.Helm = &v1alpha1.HelmSource{}
		s.Spec.NamePrefix = "p-"
	})
	synctest.Create(t, f.c, synctest.NewSync(f.ns, f.git.RepoURL("app"), 0, func(s *v1alpha1.Sync) { s.Name = "installed" }))
	err := f.c.Create(context.Background(), s)
	if err == nil || !strings.Contains(err.Error(), "postRenderers") {
		t.Fatalf("want the API server to refuse namePrefix on a chart, pointing at postRenderers; got %v", err)
	}
}
