package daemon

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/converge-dev/converge/e2e/chartrepo"
	"github.com/converge-dev/converge/e2e/registry"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// chartWithGreeting is helmChart with values.yaml's greeting set.
func chartWithGreeting(t *testing.T, greeting string) string {
	files := map[string]string{}
	for k, v := range helmChart {
		files[k] = v
	}
	files["values.yaml"] = "greeting: " + greeting + "\nsize: 1\n"
	return chartrepo.WriteChart(t, files)
}

// TestDaemonAppliesChartFromRepository: a Sync naming a chart of an HTTP Helm repository
// behind basic auth (credentials from a Secret read as the Sync's identity) by a version
// constraint applies the highest matching version at "<version>@sha256:<archive>"; a new
// version in the index is applied; a constraint nothing matches and a wrong password leave
// Ready=False FetchFailed naming the chart, with the last revision and its objects kept
// (I8); the same chart pushed with helm push to an OCI registry is applied from there.
func TestDaemonAppliesChartFromRepository(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	repo := chartrepo.Start(t, chartrepo.Options{Username: "reader", Password: "pw"})
	repo.Add(t, chartWithGreeting(t, "one"), "0.1.0")
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "charts"},
		Data: map[string][]byte{"username": []byte("reader"), "password": []byte("pw")}}
	if err := f.c.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	f.startDaemon(env.Config) // AllowLocalGit: the repository listens on loopback
	f.createSync(2*time.Second, func(s *v1alpha1.Sync) {
		s.Spec.Source = v1alpha1.Source{HelmRepository: &v1alpha1.HelmRepositorySource{URL: repo.URL, SecretRef: &v1alpha1.LocalObjectReference{Name: "charts"}},
			Helm: &v1alpha1.HelmSource{Chart: "web", Version: "0.1.x"}}
		s.Spec.Wait = false // no Job controller runs here: the chart's hook Job never completes
	})
	s := f.waitSync("Ready at 0.1.0", func(s *v1alpha1.Sync) bool {
		return meta.IsStatusConditionTrue(s.Status.Conditions, v1alpha1.ConditionReady) && strings.HasPrefix(s.Status.LastAppliedRevision, "0.1.0@sha256:")
	})
	if cm, err := f.configMap("app-config"); err != nil || cm.Data["greeting"] != "one" || cm.Data["namespace"] != f.ns {
		t.Fatalf("app-config = %v, %v; want greeting one in %s", cm.Data, err, f.ns)
	}
	if _, err := f.configMap("app-sub"); err != nil {
		t.Errorf("the subchart's ConfigMap: %v", err)
	}

	repo.Add(t, chartWithGreeting(t, "two"), "0.1.1")
	s = f.waitSync("Ready at 0.1.1", func(s *v1alpha1.Sync) bool {
		return meta.IsStatusConditionTrue(s.Status.Conditions, v1alpha1.ConditionReady) && strings.HasPrefix(s.Status.LastAppliedRevision, "0.1.1@sha256:")
	})
	rev := s.Status.LastAppliedRevision
	if cm, err := f.configMap("app-config"); err != nil || cm.Data["greeting"] != "two" {
		t.Errorf("app-config = %v, %v; want greeting two", cm.Data, err)
	}

	for _, c := range []struct {
		what   string
		mutate func(*v1alpha1.Sync)
		want   string
	}{
		{"no matching version", func(s *v1alpha1.Sync) { s.Spec.Source.Helm.Version = ">=5" }, `no version of 2 matches ">=5"`},
		{"wrong password", func(s *v1alpha1.Sync) {
			s.Spec.Source.Helm.Version = "0.1.x"
			s.Spec.Source.HelmRepository.SecretRef = &v1alpha1.LocalObjectReference{Name: "wrong"}
		}, "refused the credentials"},
	} {
		if c.what == "wrong password" {
			wrong := secret.DeepCopy()
			wrong.ObjectMeta = metav1.ObjectMeta{Namespace: f.ns, Name: "wrong"}
			wrong.Data["password"] = []byte("nope")
			if err := f.c.Create(ctx, wrong); err != nil {
				t.Fatal(err)
			}
		}
		f.updateSync("app", c.mutate)
		s := f.waitSync("Ready=False: "+c.what, func(s *v1alpha1.Sync) bool {
			return s.Status.ObservedGeneration == s.Generation && meta.IsStatusConditionFalse(s.Status.Conditions, v1alpha1.ConditionReady)
		})
		ready := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
		if ready.Reason != reasonFetchFailed || !strings.Contains(ready.Message, "chart web") || !strings.Contains(ready.Message, c.want) {
			t.Errorf("%s: Ready = %s %q, want %s naming chart web and %q", c.what, ready.Reason, ready.Message, reasonFetchFailed, c.want)
		}
		if s.Status.LastAppliedRevision != rev {
			t.Errorf("%s: lastAppliedRevision %q, want %q kept", c.what, s.Status.LastAppliedRevision, rev)
		}
		if cm, err := f.configMap("app-config"); err != nil || cm.Data["greeting"] != "two" {
			t.Errorf("%s: app-config = %v, %v; want greeting two kept, nothing pruned", c.what, cm.Data, err)
		}
	}

	reg := registry.Start(t, registry.Options{Username: "reader", Password: "pw"})
	d := reg.PushChart(t, "charts", "web", "0.2.0", chartrepo.Package(t, chartWithGreeting(t, "three"), "0.2.0"))
	f.updateSync("app", func(s *v1alpha1.Sync) {
		s.Spec.Source.HelmRepository = &v1alpha1.HelmRepositorySource{URL: "oci://" + reg.Host + "/charts", Insecure: true,
			SecretRef: &v1alpha1.LocalObjectReference{Name: "charts"}}
		s.Spec.Source.Helm.Version = "0.2.0"
	})
	f.waitSync("Ready at 0.2.0 from the registry", readyAt("0.2.0@"+d.String()))
	if cm, err := f.configMap("app-config"); err != nil || cm.Data["greeting"] != "three" {
		t.Errorf("app-config = %v, %v; want greeting three", cm.Data, err)
	}
}
