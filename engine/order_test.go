package engine

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
