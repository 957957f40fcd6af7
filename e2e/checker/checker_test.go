package checker

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/deploy"
	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/status/v1alpha1"
)

var env *cluster.Cluster

func TestMain(m *testing.M) { cluster.Main(m, cluster.API, &env) }

// TestCheckerReportsViolations breaks each invariant once, next to changes that keep them
// (an inventoried object present at Start, one created and deleted while inventoried), and
// checks the report names exactly the violations: an owned object missing from the
// inventory (I2), deletes of a foreign object and of an inventoried object whose UID differs
// from the recorded one (I1), observedGeneration and lastAppliedRevision going back (I5).
func TestCheckerReportsViolations(t *testing.T) {
	cluster.Require(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	installCRD(t, dyn)
	syncs := dyn.Resource(v1alpha1.GroupVersion.WithResource("syncs")).Namespace(ns)
	sync := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": "Sync",
		"metadata": map[string]any{"name": "app"},
		"spec":     map[string]any{"source": map[string]any{"git": map[string]any{"url": "https://git.example/a.git"}}, "interval": "1m"},
	}}
	if _, err := syncs.Create(ctx, sync, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	opts := ForSync(ns, "app")
	cms := env.Clientset().CoreV1().ConfigMaps(ns)
	id := func(name string) string { return ns + "_" + name + "__ConfigMap" }
	create := func(name, owner string) *corev1.ConfigMap {
		t.Helper()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if owner != "" {
			cm.Annotations = map[string]string{OwnerAnnotation: owner}
		}
		cm, err := cms.Create(ctx, cm, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cm
	}
	del := func(name string) {
		t.Helper()
		if err := cms.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	inv := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: opts.InventoryName, Labels: map[string]string{"cli-utils.sigs.k8s.io/inventory-id": opts.InventoryID}},
		Data: map[string]string{id("a-early"): "", id("ours"): "", id("recreated"): "00000000-0000-0000-0000-000000000000"}}
	if _, err := cms.Create(ctx, inv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	create("a-early", opts.InventoryID) // listed before the inventory at Start: not a violation
	chk, err := Start(ctx, env.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	create("ours", opts.InventoryID)
	create("recreated", opts.InventoryID)
	create("stray", opts.InventoryID) // I2
	create("foreign", opts.InventoryID+"-other")
	taken := create("taken", opts.InventoryID+"-other")
	taken.Annotations[OwnerAnnotation] = opts.InventoryID // I11, and I2: not inventoried
	if _, err := cms.Update(ctx, taken, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	del("ours")
	del("recreated") // I1: UID differs from the recorded one
	del("foreign")   // I1: not ours
	for _, st := range []map[string]any{
		{"observedGeneration": 2, "lastAppliedRevision": "r1"},
		{"observedGeneration": 2, "lastAppliedRevision": "r2"},
		{"observedGeneration": 1, "lastAppliedRevision": "r1"}, // I5 twice
	} {
		patch := fmt.Appendf(nil, `{"status":{"observedGeneration":%d,"lastAppliedRevision":%q}}`, st["observedGeneration"], st["lastAppliedRevision"])
		if _, err := syncs.Patch(ctx, "app", types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
			t.Fatal(err)
		}
	}

	report, err := chk.Stop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range report.Violations {
		name, _, _ := strings.Cut(strings.TrimPrefix(v.Object, ns+"/"), " ")
		got = append(got, v.Invariant+" "+name)
	}
	sort.Strings(got)
	want := []string{"I1 foreign", "I1 recreated", "I11 taken", "I2 stray", "I2 taken", "I5 Sync/app", "I5 Sync/app"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("violations (-want +got):\n%s\nreport: %v", diff, report.Violations)
	}
	if report.Gone != 3 {
		t.Errorf("%d objects seen going away, want 3", report.Gone)
	}
}

func installCRD(t *testing.T, dyn dynamic.Interface) {
	t.Helper()
	crd := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(deploy.SyncCRD, &crd.Object); err != nil {
		t.Fatal(err)
	}
	crds := dyn.Resource(apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions"))
	if _, err := crds.Create(t.Context(), crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if err := engine.WaitEstablished(t.Context(), env.Client(t), []string{crd.GetName()}, 30*time.Second); err != nil {
		t.Fatalf("CRD not established: %v", err)
	}
	// The API server serves the new resource a moment after Established.
	_ = wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := dyn.Resource(v1alpha1.GroupVersion.WithResource("syncs")).List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil, nil
	})
}
