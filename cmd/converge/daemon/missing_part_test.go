package daemon

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/converge-dev/converge/inventory"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// TestDaemonStallsOnMissingInventoryPart: the Sync's inventory lists a part ConfigMap that
// is gone (deleted by hand): nothing can be applied or pruned until a person restores it or
// accepts the loss (inventory.MissingPartError), so the Sync is Stalled with its own reason
// and the error's instructions, not retried with back-off as a transient ApplyFailed. Once
// the head no longer lists the part (the loss accepted), the Sync is Ready again. Without
// it: Ready=False ApplyFailed, never Stalled.
func TestDaemonStallsOnMissingInventoryPart(t *testing.T) {
	f := newFixture(t)
	rev := f.publish(map[string]string{"b.yaml": cmB})
	f.startDaemon(env.Config)
	s := f.createSync(2 * time.Second)
	f.waitSync("Ready", readyAt(rev))

	ref := InventoryRef(s)
	setParts := func(parts string) {
		head, err := f.configMap(ref.Name)
		if err != nil {
			t.Fatal(err)
		}
		if parts == "" {
			delete(head.Annotations, inventory.PartsAnnotation)
		} else {
			head.SetAnnotations(map[string]string{inventory.PartsAnnotation: parts})
		}
		if err := f.c.Update(context.Background(), head); err != nil {
			t.Fatal(err)
		}
	}
	setParts(ref.Name + "-part-gone")
	f.requestReconcile("app")
	f.waitSync("Stalled on the missing part", func(s *v1alpha1.Sync) bool {
		return readyFalse(reasonInventoryPartMissing, "its part ConfigMap "+f.ns+"/"+ref.Name+"-part-gone is missing")(s) &&
			meta.IsStatusConditionTrue(s.Status.Conditions, v1alpha1.ConditionStalled)
	})
	if _, err := f.configMap("b"); err != nil {
		t.Errorf("b after the stall: %v", err)
	}

	setParts("")
	f.requestReconcile("app")
	f.waitSync("Ready once the loss is accepted", func(s *v1alpha1.Sync) bool {
		return readyAt(rev)(s) && !meta.IsStatusConditionTrue(s.Status.Conditions, v1alpha1.ConditionStalled)
	})
}
