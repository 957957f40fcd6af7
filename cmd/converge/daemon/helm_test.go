package daemon

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// helmChart is a chart at the repository root: a ConfigMap from values merged over
// values.yaml, a subchart's ConfigMap, an install hook (applied) and a test hook (dropped).
var helmChart = map[string]string{
	"Chart.yaml":  "apiVersion: v2\nname: web\nversion: 0.1.0\ndependencies:\n  - name: sub\n    version: 0.1.0\n",
	"values.yaml": "greeting: hi\nsize: 1\n",
	"templates/cm.yaml": `apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-config
data:
  greeting: {{ .Values.greeting | quote }}
  size: {{ .Values.size | quote }}
  namespace: {{ .Release.Namespace }}
  kube: {{ .Capabilities.KubeVersion.Version }}
`,
	"templates/hooks.yaml": `apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-pre-install
  annotations:
    helm.sh/hook: pre-install,pre-upgrade
---
apiVersion: batch/v1
kind: Job
metadata:
  name: {{ .Release.Name }}-migrate
  annotations:
    helm.sh/hook: pre-upgrade,pre-install
    helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: migrate
          image: "migrate:{{ .Values.size }}"
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-test
  annotations:
    helm.sh/hook: test
`,
	"charts/sub/Chart.yaml":          "apiVersion: v2\nname: sub\nversion: 0.1.0\n",
	"charts/sub/templates/sub.yaml":  "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-sub\ndata:\n  chart: {{ .Chart.Name }}\n",
	"charts/sub/templates/NOTES.txt": "not an object\n",
}

// TestDaemonRendersHelmChart: a Sync whose spec.source.helm renders the chart at its git
// path applies the chart's objects (release name the Sync's, objects without a namespace in
// the release namespace, .Capabilities.KubeVersion the API server's, the install hooks
// applied, the test hook not); a values change in
// the Sync is applied, the hook Job whose template it changes (immutable) recreated as Helm
// would create it anew; a commit with a template error leaves Ready=False BuildFailed naming
// the template and its line, with nothing pruned (I8).
func TestDaemonRendersHelmChart(t *testing.T) {
	f := newFixture(t)
	rev1 := f.publish(helmChart)
	f.startDaemon(env.Config)
	f.createSync(2*time.Second, func(s *v1alpha1.Sync) {
		s.Spec.Source.Helm = &v1alpha1.HelmSource{Values: &apiextensionsv1.JSON{Raw: []byte(`{"greeting":"hello"}`)}}
		s.Spec.Wait = false // no Job controller runs here: the hook Job never completes
	})
	f.waitSync("Ready at the first commit", readyAt(rev1))
	info, err := discovery.NewDiscoveryClientForConfigOrDie(env.Config).ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	wantData := map[string]string{"greeting": "hello", "size": "1", "namespace": f.ns, "kube": info.GitVersion}
	if cm, err := f.configMap("app-config"); err != nil || !equalData(cm, wantData) {
		t.Errorf("app-config = %v, %v; want %v", cm.Data, err, wantData)
	}
	for _, name := range []string{"app-sub", "app-pre-install"} {
		if _, err := f.configMap(name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := f.configMap("app-test"); !apierrors.IsNotFound(err) {
		t.Errorf("the test hook was applied: %v", err)
	}
	job1 := f.job("app-migrate")

	// A values change in the Sync is rendered and applied at the same revision.
	f.updateSync("app", func(s *v1alpha1.Sync) {
		s.Spec.Source.Helm.Values = &apiextensionsv1.JSON{Raw: []byte(`{"greeting":"bonjour","size":3}`)}
	})
	f.waitSync("Ready with the new values", func(s *v1alpha1.Sync) bool {
		return readyAt(rev1)(s) && s.Status.ObservedGeneration == s.Generation
	})
	wantData = map[string]string{"greeting": "bonjour", "size": "3", "namespace": f.ns, "kube": info.GitVersion}
	if cm, err := f.configMap("app-config"); err != nil || !equalData(cm, wantData) {
		t.Errorf("app-config = %v, %v; want %v", cm.Data, err, wantData)
	}
	job2 := f.job("app-migrate")
	if job2.UID == job1.UID || job2.Spec.Template.Spec.Containers[0].Image != "migrate:3" {
		t.Errorf("hook Job: UID %s then %s, image %s; want a new Job with image migrate:3", job1.UID, job2.UID, job2.Spec.Template.Spec.Containers[0].Image)
	}

	// A template error: BuildFailed naming the template and line; nothing pruned, though
	// the broken commit also drops the subchart.
	rev2 := f.publish(map[string]string{"templates/bad.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bad\ndata:\n  a: {{ .Values.missing.field }}\n",
		"charts/sub/Chart.yaml": "", "charts/sub/templates/sub.yaml": "", "charts/sub/templates/NOTES.txt": "",
		"Chart.yaml": "apiVersion: v2\nname: web\nversion: 0.1.0\n"})
	s := f.waitSync("Ready=False on the broken template", func(s *v1alpha1.Sync) bool {
		return s.Status.LastAttemptedRevision == rev2 && meta.IsStatusConditionFalse(s.Status.Conditions, v1alpha1.ConditionReady)
	})
	ready := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
	if ready.Reason != reasonBuildFailed || !strings.HasPrefix(ready.Message, "templates/bad.yaml:6: ") || !strings.Contains(ready.Message, "nil pointer evaluating interface {}.field") {
		t.Errorf("Ready = %s %q, want %s naming templates/bad.yaml:6", ready.Reason, ready.Message, reasonBuildFailed)
	}
	if s.Status.LastAppliedRevision != rev1 {
		t.Errorf("lastAppliedRevision %q, want %q", s.Status.LastAppliedRevision, rev1)
	}
	for _, name := range []string{"app-config", "app-sub", "app-pre-install"} {
		if _, err := f.configMap(name); err != nil {
			t.Errorf("%s after the broken commit: %v", name, err)
		}
	}
	if j := f.job("app-migrate"); j.UID != job2.UID {
		t.Errorf("hook Job recreated by the broken commit")
	}
	if err := f.c.Get(t.Context(), client.ObjectKey{Namespace: f.ns, Name: "bad"}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("ConfigMap bad: %v, want not found", err)
	}
}

func (f *fixture) job(name string) *batchv1.Job {
	f.t.Helper()
	j := &batchv1.Job{}
	if err := f.c.Get(f.t.Context(), client.ObjectKey{Namespace: f.ns, Name: name}, j); err != nil {
		f.t.Fatalf("Job %s: %v", name, err)
	}
	return j
}

func equalData(cm *corev1.ConfigMap, want map[string]string) bool {
	if len(cm.Data) != len(want) {
		return false
	}
	for k, v := range want {
		if cm.Data[k] != v {
			return false
		}
	}
	return true
}

// TestHelmForceAnnotationIsTheEngines: the annotation sources puts on a chart's hooks is the
// one the engine reads (sources may not import the engine).
func TestHelmForceAnnotationIsTheEngines(t *testing.T) {
	if sources.ForceAnnotation != engine.ForceAnnotation || sources.ForceEnabled != engine.ForceEnabled {
		t.Errorf("sources %s=%s, engine %s=%s", sources.ForceAnnotation, sources.ForceEnabled, engine.ForceAnnotation, engine.ForceEnabled)
	}
}
