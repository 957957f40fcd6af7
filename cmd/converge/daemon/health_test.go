package daemon

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/converge-dev/converge/cmd/converge/internal/synctest"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// readyFalse reports a Sync of its current generation whose Ready=False has reason and a
// message containing want.
func readyFalse(reason, want string) func(*v1alpha1.Sync) bool {
	return func(s *v1alpha1.Sync) bool {
		r := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
		return s.Status.ObservedGeneration == s.Generation && r != nil && r.Status == metav1.ConditionFalse &&
			r.Reason == reason && strings.Contains(r.Message, want)
	}
}

// TestDaemonHealthChecks: spec.healthChecks and spec.healthCheckExprs reach the engine
// through the daemon. An extra object is waited for (Ready=False naming it until it exists);
// a failed expression ends the wait with its message; an expression that does not compile
// stops the Sync before anything is applied, naming the entry, the field and the position,
// and prunes nothing.
func TestDaemonHealthChecks(t *testing.T) {
	f := newFixture(t)
	rev := f.publish(map[string]string{"b.yaml": cmB})
	f.startDaemon(env.Config)
	f.createSync(2*time.Second, func(s *v1alpha1.Sync) {
		s.Spec.Timeout = &metav1.Duration{Duration: 2 * time.Second}
		s.Spec.HealthChecks = []v1alpha1.HealthCheck{{APIVersion: "v1", Kind: "ConfigMap", Name: "extra"}}
	})
	f.waitSync("Ready=False waiting for the extra object", readyFalse(reasonHealthCheck, "ConfigMap "+f.ns+"/extra"))
	extra := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "extra"}}
	if err := f.c.Create(context.Background(), extra); err != nil {
		t.Fatal(err)
	}
	f.waitSync("Ready once the extra object exists", readyAt(rev))

	f.updateSync("app", func(s *v1alpha1.Sync) {
		s.Spec.HealthChecks = nil
		s.Spec.HealthCheckExprs = []v1alpha1.HealthCheckExpr{{APIVersion: "v1", Kind: "ConfigMap",
			Current: "true", Failed: "metadata.name == 'b'"}}
	})
	f.waitSync("Ready=False on the failed expression", readyFalse(reasonHealthCheck, "healthCheckExprs[0].failed is true"))

	f.publish(map[string]string{"b.yaml": "", "c.yaml": strings.ReplaceAll(cmB, "name: b", "name: c")})
	f.updateSync("app", func(s *v1alpha1.Sync) {
		s.Spec.HealthCheckExprs = []v1alpha1.HealthCheckExpr{{APIVersion: "v1", Kind: "ConfigMap", Current: "metadata.name =="}}
	})
	f.waitSync("stalled on the expression", func(s *v1alpha1.Sync) bool {
		return readyFalse(reasonApplyFailed, "healthCheckExprs[0] (v1 ConfigMap).current: ERROR: <input>:1:")(s) &&
			meta.IsStatusConditionTrue(s.Status.Conditions, v1alpha1.ConditionStalled)
	})
	if _, err := f.configMap("b"); err != nil {
		t.Errorf("configmap b after a refused expression: %v, want it kept (nothing pruned)", err)
	}
	if _, err := f.configMap("c"); err == nil {
		t.Errorf("configmap c was applied although an expression did not compile")
	}
}

// TestHealthChecksBoundedByTheCRD: the API server refuses a Sync with more than 256 health
// checks, each a GET per readiness poll, naming spec.healthChecks.
func TestHealthChecksBoundedByTheCRD(t *testing.T) {
	f := newFixture(t)
	f.startDaemon(env.Config) // installs the CRD
	checks := make([]v1alpha1.HealthCheck, 257)
	for i := range checks {
		checks[i] = v1alpha1.HealthCheck{APIVersion: "v1", Kind: "ConfigMap", Name: fmt.Sprintf("cm-%d", i)}
	}
	s := synctest.NewSync(f.ns, f.git.RepoURL("app"), time.Minute, func(s *v1alpha1.Sync) { s.Spec.HealthChecks = checks })
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := f.c.Create(ctx, s)
		return err != nil && strings.Contains(err.Error(), "spec.healthChecks"), nil
	})
	if err != nil {
		t.Errorf("a Sync with 257 health checks was created, or refused without naming spec.healthChecks")
	}
}
