package daemon

import (
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// TestDaemonWaveNotReady: a Sync whose wave 0 never becomes Ready (a health expression
// keeps ConfigMap gate InProgress) is HealthCheckFailed once spec.timeout passes, naming the
// object waited for, its wave and the object of wave 1 not applied; that one is never
// created. Without it: the ConfigMap of wave 1 was applied with the first reconcile.
func TestDaemonWaveNotReady(t *testing.T) {
	f := newFixture(t)
	f.publish(map[string]string{
		"gate.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: gate\n  annotations:\n    argocd.argoproj.io/sync-wave: \"0\"\n",
		"late.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: late\n  annotations:\n    converge.dev/wave: \"1\"\n",
	})
	f.startDaemon(env.Config)
	f.createSync(2*time.Second, func(s *v1alpha1.Sync) {
		s.Spec.Timeout = &metav1.Duration{Duration: 2 * time.Second}
		s.Spec.HealthCheckExprs = []v1alpha1.HealthCheckExpr{{APIVersion: "v1", Kind: "ConfigMap", Current: "metadata.name != 'gate'"}}
	})
	f.waitSync("HealthCheckFailed naming the wave", readyFalse(reasonHealthCheck,
		"ConfigMap "+f.ns+"/late (wave 1) not applied: waiting for ConfigMap "+f.ns+"/gate (wave 0)"))
	if _, err := f.configMap("late"); !apierrors.IsNotFound(err) {
		t.Fatalf("ConfigMap late of wave 1: %v, want it never applied", err)
	}
}
