package daemon

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// TestDaemonTakeOverManagers: a Sync adopting a ConfigMap Flux applied honours
// spec.takeOverManagers: with an empty list kustomize-controller keeps its entry and the
// data key the source does not declare (Flux's tracking label is removed either way); once
// the field is unset (the default list), the next reconcile hands the fields over and the
// key goes. The object keeps its UID throughout.
//
// Without it: the field did not exist, and kustomize-controller's key stayed whatever the
// Sync said.
func TestDaemonTakeOverManagers(t *testing.T) {
	f := newFixture(t)
	rev := f.publish(map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "1", 1)})
	flux := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "a", "namespace": f.ns, "labels": map[string]any{"kustomize.toolkit.fluxcd.io/name": "app"}},
		"data":     map[string]any{"version": "1", "extra": "x"}}}
	if err := f.c.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(flux), client.FieldOwner("kustomize-controller")); err != nil {
		t.Fatal(err)
	}
	uid := mustConfigMap(t, f, "a").GetUID()
	f.startDaemon(env.Config)
	f.createSync(time.Hour, func(s *v1alpha1.Sync) {
		s.Spec.Adopt = true
		s.Spec.TakeOverManagers = &[]string{}
	})
	f.waitSync("Ready with no manager to take over", readyAt(rev))
	cm, err := f.configMap("a")
	if err != nil {
		t.Fatal(err)
	}
	var managers []string
	for _, mf := range cm.ManagedFields {
		managers = append(managers, mf.Manager)
	}
	if cm.Data["extra"] != "x" || !strings.Contains(strings.Join(managers, ","), "kustomize-controller") {
		t.Errorf("with takeOverManagers: [], kustomize-controller's fields were taken: data %v, managers %v", cm.Data, managers)
	}
	if _, ok := cm.Labels["kustomize.toolkit.fluxcd.io/name"]; ok {
		t.Errorf("Flux's tracking label stayed: %v", cm.Labels)
	}

	f.updateSync("app", func(s *v1alpha1.Sync) { s.Spec.TakeOverManagers = nil })
	err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		cm, err = f.configMap("a")
		_, has := cm.Data["extra"]
		return err == nil && !has, err
	})
	if err != nil || cm.UID != uid {
		t.Fatalf("with the default list: data %v, UID %s (was %s): %v", cm.Data, cm.UID, uid, err)
	}
}
