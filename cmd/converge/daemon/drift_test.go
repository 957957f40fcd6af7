package daemon

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestDaemonCorrectsDriftWithoutWaiting checks --reconcile-on-drift: with an interval of an
// hour, an out-of-band edit of a managed object and the deletion of another are still put
// right, because the watch cache reports them and the daemon reconciles the owning Sync (I7;
// the drift target of docs/benchmarks.md: corrected within 5 s of the edit). Without the trigger nothing would happen for an hour.
func TestDaemonCorrectsDriftWithoutWaiting(t *testing.T) {
	f := newFixture(t)
	rev := f.publish(map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "1", 1), "b.yaml": cmB})
	f.startDaemon(env.Config)
	f.createSync(time.Hour)
	f.waitSync("Ready at the first commit", readyAt(rev))

	cm, err := f.configMap("a")
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["version"] = "edited"
	if err := f.c.Update(context.Background(), cm, client.FieldOwner("kubectl-edit")); err != nil {
		t.Fatal(err)
	}
	if err := f.c.Delete(context.Background(), mustConfigMap(t, f, "b")); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		a, errA := f.configMap("a")
		_, errB := f.configMap("b")
		if errB != nil && !apierrors.IsNotFound(errB) {
			return false, errB
		}
		return errA == nil && a.Data["version"] == "1" && errB == nil, nil
	})
	if err != nil {
		a, _ := f.configMap("a")
		_, errB := f.configMap("b")
		t.Fatalf("drift not corrected before the interval: a.data = %v, b: %v (%v)", a.Data, errB, err)
	}
}

func mustConfigMap(t *testing.T, f *fixture, name string) client.Object {
	t.Helper()
	cm, err := f.configMap(name)
	if err != nil {
		t.Fatal(err)
	}
	return cm
}
