package daemon

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// TestDaemonIgnoreLeavesFieldAlone: with spec.ignore naming web's data.replicas, another
// manager's change of it is left alone and counted as no drift, while the same change of
// another ConfigMap is taken back (the drift path ran); a rule that selects nothing of the
// render is reported in the Ready message, and the Sync is Ready. Without the rules web's
// data.replicas was set back and counted as drift.
func TestDaemonIgnoreLeavesFieldAlone(t *testing.T) {
	f := newFixture(t)
	rev := f.publish(map[string]string{
		"web.yaml":   "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web, namespace: NS}\ndata: {replicas: \"3\", image: v1}\n",
		"other.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other, namespace: NS}\ndata: {replicas: \"3\"}\n",
	})
	addr := cluster.FreeAddr()
	f.startDaemon(env.Config, func(o *Options) { o.MetricsAddr = addr })
	f.createSync(time.Hour, func(s *v1alpha1.Sync) {
		s.Spec.Ignore = []v1alpha1.IgnoreRule{
			{Paths: []string{"/data/replicas"}, Target: &v1alpha1.PatchSelector{Kind: "ConfigMap", Name: "web"}},
			{Paths: []string{"/spec/replicas"}, Target: &v1alpha1.PatchSelector{Kind: "Deployment"}},
		}
	})
	s := f.waitSync("Ready", readyAt(rev))
	c := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
	if !strings.Contains(c.Message, "spec.ignore: ignore rule 1 selects no object of the set") {
		t.Errorf("Ready message %q does not report the rule that selects nothing", c.Message)
	}
	for _, name := range []string{"web", "other"} {
		cm, err := f.configMap(name)
		if err != nil {
			t.Fatal(err)
		}
		cm.Data["replicas"] = "7"
		if err := f.c.Update(context.Background(), cm, client.FieldOwner("autoscaler")); err != nil {
			t.Fatal(err)
		}
	}
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		cm, err := f.configMap("other")
		return err == nil && cm.Data["replicas"] == "3", nil
	})
	if err != nil {
		t.Fatal("the drift of other, which no rule selects, was never taken back")
	}
	f.requestReconcile("app") // one more full reconcile after the drift one
	f.waitSync("the request handled", func(s *v1alpha1.Sync) bool {
		return s.Status.LastHandledRequest != "" && s.Status.LastHandledRequest == s.Annotations[v1alpha1.RequestedAtAnnotation] && readyAt(rev)(s)
	})
	if cm, err := f.configMap("web"); err != nil || cm.Data["replicas"] != "7" {
		t.Errorf("web: data %v (%v), want the other manager's replicas 7 left alone", cm.Data, err)
	}
	if got := f.scrape(addr, "converge_drift_corrections_total"); got != 1 {
		t.Errorf("drift corrections = %v, want 1 (other only; web's ignored field is no drift)", got)
	}
}

// TestDaemonIgnoreManagers: a spec.ignore rule naming a field manager reaches the engine:
// the fields that manager changed in web are left alone through a full reconcile. (A rule
// that lost its managers on the way would name nothing, a terminal error.)
func TestDaemonIgnoreManagers(t *testing.T) {
	f := newFixture(t)
	rev := f.publish(map[string]string{
		"web.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web, namespace: NS}\ndata: {replicas: \"3\", image: v1}\n",
	})
	f.startDaemon(env.Config)
	f.createSync(time.Hour, func(s *v1alpha1.Sync) {
		s.Spec.Ignore = []v1alpha1.IgnoreRule{{Managers: []string{"autoscaler"}, Target: &v1alpha1.PatchSelector{Kind: "ConfigMap"}}}
	})
	f.waitSync("Ready", readyAt(rev))
	cm, err := f.configMap("web")
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["replicas"], cm.Data["image"] = "7", "v0"
	if err := f.c.Update(context.Background(), cm, client.FieldOwner("autoscaler")); err != nil {
		t.Fatal(err)
	}
	f.requestReconcile("app")
	f.waitSync("the request handled", func(s *v1alpha1.Sync) bool {
		return s.Status.LastHandledRequest != "" && s.Status.LastHandledRequest == s.Annotations[v1alpha1.RequestedAtAnnotation] && readyAt(rev)(s)
	})
	if cm, err := f.configMap("web"); err != nil || cm.Data["replicas"] != "7" || cm.Data["image"] != "v0" {
		t.Errorf("web: data %v (%v), want the autoscaler's replicas 7 and image v0 left alone", cm.Data, err)
	}
}
