package engine

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/cli-utils/pkg/object"
)

// BenchmarkOrderItems places 10,000 objects of which n depend on one other object each
// (a depends-on chain of 10 and fan-ins to 10 bases), as every reconcile does in prepare.
func BenchmarkOrderItems(b *testing.B) {
	for _, n := range []int{0, 100, 1000, 10000} {
		b.Run(fmt.Sprintf("dependents=%d", n), func(b *testing.B) {
			build := func() []*item {
				items := make([]*item, 10000)
				for i := range items {
					id := object.ObjMetadata{Namespace: "apps", Name: fmt.Sprintf("cm-%05d", i), GroupKind: schema.GroupKind{Kind: "ConfigMap"}}
					items[i] = &item{id: id, pos: position{stage: stageResources, wave: i % 3}}
					if i >= 10 && i < 10+n {
						dep := object.ObjMetadata{Namespace: "apps", Name: fmt.Sprintf("cm-%05d", i%10), GroupKind: id.GroupKind}
						items[i].deps = []object.ObjMetadata{dep}
					}
				}
				return items
			}
			for b.Loop() {
				b.StopTimer()
				items := build()
				b.StartTimer()
				if _, err := orderItems(items, ""); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
