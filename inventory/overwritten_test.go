package inventory

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/e2e/cluster"
)

// TestRepairOnlyOverwrittenHeads: a head that carries its own ID as owner annotation and a
// data key that is no entry reads as OverwrittenError, and Repair takes out that key and the
// head's own entry, keeping the other entries; a head with a bad key but no such annotation
// (someone else's edit) is a plain read error, and Repair leaves it untouched.
func TestRepairOnlyOverwrittenHeads(t *testing.T) {
	cluster.Require(t, env)
	ctx := testCtx(t)
	ns := env.Namespace(t)
	s, _, plain := newStore(t)
	for name, annotated := range map[string]bool{"over": true, "edited": false} {
		ref := Ref{Namespace: ns, Name: name, ID: "id-" + name}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{IDLabel: ref.ID}},
			Data: map[string]string{"a": "1", ns + "_x__ConfigMap": "uid-x", ns + "_" + name + "__ConfigMap": "uid-self"}}
		if annotated {
			cm.Annotations = map[string]string{OwnerAnnotation: ref.ID}
		}
		if err := plain.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		_, err := s.Get(ctx, ref)
		if err == nil || IsOverwritten(err) != annotated {
			t.Errorf("%s: Get = %v; want an error, OverwrittenError %v", name, err, annotated)
		}
		removed, err := s.Repair(ctx, ref)
		if err != nil {
			t.Fatalf("%s: Repair: %v", name, err)
		}
		got := &corev1.ConfigMap{}
		if err := plain.Get(ctx, client.ObjectKeyFromObject(cm), got); err != nil {
			t.Fatal(err)
		}
		if !annotated {
			if len(removed) > 0 || !cmp.Equal(cm.Data, got.Data) {
				t.Errorf("%s: Repair removed %v of a head not overwritten by its set; data now %v", name, removed, got.Data)
			}
			continue
		}
		want := map[string]string{ns + "_x__ConfigMap": "uid-x"}
		if diff := cmp.Diff(want, got.Data); diff != "" || got.Annotations[OwnerAnnotation] != "" {
			t.Errorf("%s: repaired data (-want +got):\n%s\nowner annotation %q", name, diff, got.Annotations[OwnerAnnotation])
		}
		if inv, err := s.Get(ctx, ref); err != nil || inv.Len() != 1 {
			t.Errorf("%s: Get after Repair = %v, %v; want the one entry", name, inv, err)
		}
	}
}
