package engine

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/cli-utils/pkg/object"

	"github.com/converge-dev/converge/inventory"
)

func TestStageAndPruneOrder(t *testing.T) {
	kinds := []schema.GroupKind{
		{Kind: "ConfigMap"}, {Group: "apps", Kind: "Deployment"}, {Group: "example.com", Kind: "Widget"},
		{Group: "storage.k8s.io", Kind: "StorageClass"}, clusterRoleGK, crdGK, namespaceGK,
	}
	var stages, ranks []int
	for _, gk := range kinds {
		stages = append(stages, stageOf(gk))
		ranks = append(ranks, pruneRank(gk))
	}
	if diff := cmp.Diff([]int{2, 2, 2, 1, 0, 0, 0}, stages); diff != "" {
		t.Errorf("apply stages (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int{0, 0, 0, 1, 2, 3, 4}, ranks); diff != "" {
		t.Errorf("prune ranks (-want +got):\n%s", diff)
	}
}

// orderCase builds items for orderItems: a ConfigMap (stage of resources) or, for a name
// starting with "ns-", a Namespace, with a wave and dependencies by name.
func orderCase(t *testing.T, specs ...string) []*item {
	t.Helper()
	var items []*item
	for _, s := range specs {
		// "name:wave:dep,dep"
		parts := strings.SplitN(s, ":", 3)
		wave, _ := strconv.Atoi(parts[1])
		id := object.ObjMetadata{Namespace: "apps", Name: parts[0], GroupKind: schema.GroupKind{Kind: "ConfigMap"}}
		if strings.HasPrefix(parts[0], "ns-") {
			id = object.ObjMetadata{Name: parts[0], GroupKind: namespaceGK}
		}
		it := &item{id: id, key: id.String(), pos: position{stage: stageOf(id.GroupKind), wave: wave}}
		if len(parts) == 3 && parts[2] != "" {
			for _, d := range strings.Split(parts[2], ",") {
				dep := object.ObjMetadata{Namespace: "apps", Name: d, GroupKind: schema.GroupKind{Kind: "ConfigMap"}}
				if strings.HasPrefix(d, "ns-") {
					dep = object.ObjMetadata{Name: d, GroupKind: namespaceGK}
				}
				it.deps = append(it.deps, dep)
			}
		}
		items = append(items, it)
	}
	return items
}

// TestOrderItems holds the placement rules: stage first, then wave, then depends-on steps
// inside a stage and wave; a dependency of a later position moves its dependent after it; a
// dependency outside the set is left for the cluster; a set without annotations is not
// ordered at all.
func TestOrderItems(t *testing.T) {
	for _, tc := range []struct {
		name    string
		specs   []string
		ordered bool
		want    map[string]string // name → stage/wave/step
		ext     map[string]string // name → its external dependencies
	}{
		{name: "unordered", specs: []string{"a:0:", "ns-x:0:"}, want: map[string]string{"a": "2/0/0", "ns-x": "0/0/0"}},
		{name: "waves", specs: []string{"a:1:", "b:-1:", "c:0:", "ns-x:5:"}, ordered: true,
			want: map[string]string{"a": "2/1/0", "b": "2/-1/0", "c": "2/0/0", "ns-x": "0/5/0"}},
		{name: "chain in one wave", specs: []string{"a:0:b", "b:0:c", "c:0:", "d:0:"}, ordered: true,
			want: map[string]string{"a": "2/0/2", "b": "2/0/1", "c": "2/0/0", "d": "2/0/0"}},
		{name: "dependency of a later wave moves its dependent", specs: []string{"a:0:b", "b:3:", "c:1:"}, ordered: true,
			want: map[string]string{"a": "2/3/1", "b": "2/3/0", "c": "2/1/0"}},
		{name: "dependency of an earlier wave or stage", specs: []string{"a:2:b,ns-x", "b:1:", "ns-x:0:"}, ordered: true,
			want: map[string]string{"a": "2/2/0", "b": "2/1/0", "ns-x": "0/0/0"}},
		{name: "external", specs: []string{"a:0:elsewhere"}, ordered: true,
			want: map[string]string{"a": "2/0/0"}, ext: map[string]string{"a": "apps_elsewhere__ConfigMap"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			items := orderCase(t, tc.specs...)
			ordered, err := orderItems(items, "")
			if err != nil || ordered != tc.ordered {
				t.Fatalf("orderItems: ordered %v, err %v; want %v, nil", ordered, err, tc.ordered)
			}
			got, ext := map[string]string{}, map[string]string{}
			for _, it := range items {
				got[it.id.Name] = fmt.Sprintf("%d/%d/%d", it.pos.stage, it.pos.wave, it.pos.step)
				for _, d := range it.external {
					ext[it.id.Name] = d.String()
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("positions (-want +got):\n%s", diff)
			}
			if tc.ext == nil {
				tc.ext = map[string]string{}
			}
			if diff := cmp.Diff(tc.ext, ext); diff != "" {
				t.Errorf("external dependencies (-want +got):\n%s", diff)
			}
		})
	}
}

// TestOrderItemsCycle checks that a cycle is a terminal error naming the objects of the
// cycle, and not those that only depend on it.
func TestOrderItemsCycle(t *testing.T) {
	items := orderCase(t, "a:0:b", "b:0:c", "c:0:a", "d:0:a", "self:0:self", "e:0:")
	_, err := orderItems(items, "")
	if err == nil || !IsTerminal(err) || !errors.Is(err, ErrDependencyCycle) {
		t.Fatalf("orderItems error %v, want a terminal ErrDependencyCycle", err)
	}
	want := "config.kubernetes.io/depends-on cycle: ConfigMap apps/a → ConfigMap apps/b → ConfigMap apps/c → ConfigMap apps/a; " +
		"ConfigMap apps/self → ConfigMap apps/self; nothing was applied or pruned"
	if !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("error\n%s\nwant it to start with\n%s", err, want)
	}
	if strings.Contains(err.Error(), "apps/d") || strings.Contains(err.Error(), "apps/e") {
		t.Errorf("error names objects outside the cycles: %v", err)
	}
}

// TestOrderOf checks the annotations' parsing: Converge's wave over Argo CD's, negative
// waves, depends-on references of both scopes, and errors naming the annotation.
func TestOrderOf(t *testing.T) {
	wave, deps, err := orderOf(map[string]any{ArgoSyncWaveAnnotation: "-3", DependsOnAnnotation: "/namespaces/x/ConfigMap/a, rbac.authorization.k8s.io/ClusterRole/r"})
	wantDeps := []object.ObjMetadata{
		{Namespace: "x", Name: "a", GroupKind: schema.GroupKind{Kind: "ConfigMap"}},
		{Name: "r", GroupKind: clusterRoleGK},
	}
	if err != nil || wave != -3 || !cmp.Equal(wantDeps, deps) {
		t.Fatalf("orderOf = %d %v %v, want -3 %v", wave, deps, err, wantDeps)
	}
	if wave, _, _ := orderOf(map[string]any{WaveAnnotation: "2", ArgoSyncWaveAnnotation: "7"}); wave != 2 {
		t.Errorf("wave %d, want converge.dev/wave's 2 over Argo CD's", wave)
	}
	for _, bad := range []map[string]any{
		{ArgoSyncWaveAnnotation: "one"}, {WaveAnnotation: "1.5"}, {DependsOnAnnotation: "ConfigMap/a/b/c"},
	} {
		if _, _, err := orderOf(bad); err == nil {
			t.Errorf("orderOf(%v): no error", bad)
		} else if !strings.Contains(err.Error(), "annotation ") {
			t.Errorf("orderOf(%v) = %v: does not name the annotation", bad, err)
		}
	}
}

// TestPruneStagesOrdered checks the prune order: by kind rank first (Namespaces last), then
// higher waves and dependents first.
func TestPruneStagesOrdered(t *testing.T) {
	items := orderCase(t, "w0:0:", "w2:2:", "w1:1:", "dep:1:w1", "ns-x:9:")
	if _, err := orderItems(items, ""); err != nil {
		t.Fatal(err)
	}
	var entries []inventory.Entry
	for _, it := range items {
		entries = append(entries, inventory.Entry{Object: it.id})
	}
	var got []string
	for _, stage := range pruneStagesOrdered(entries, items) {
		var names []string
		for _, en := range stage {
			names = append(names, en.Object.Name)
		}
		got = append(got, strings.Join(names, ","))
	}
	if diff := cmp.Diff([]string{"w2", "dep", "w1", "w0", "ns-x"}, got); diff != "" {
		t.Errorf("prune groups (-want +got):\n%s", diff)
	}
}
