package engine

import (
	"context"
	"slices"

	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cli-utils/pkg/object"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/inventory"
)

// pruneOrder groups the prune candidates of an Apply (or the objects of a Delete) in the
// order they are deleted: the
// reverse of the apply order. By kind first (pruneRank: Namespaces last), then, inside a
// kind's rank, the higher waves before the lower ones and a dependent before what it depends
// on (DependsOnAnnotation), as the live objects' annotations say: the inventory records no
// annotation, so each candidate is read first (from the watch cache in watch mode; else from
// the API server, and that read is the one pruneOne decides on, in known). A single candidate
// needs no order and is not read here.
func (e *Engine) pruneOrder(ctx context.Context, pc pruneCall, candidates []inventory.Entry) (
	stages [][]inventory.Entry, known map[object.ObjMetadata]*metav1.PartialObjectMetadata) {
	if len(candidates) < 2 {
		return pruneStages(candidates), nil
	}
	var reader client.Reader = e.client
	if e.cache != nil {
		reader = e.cache
	}
	lives := make([]*metav1.PartialObjectMetadata, len(candidates))
	var g errgroup.Group
	g.SetLimit(max(pc.concurrency, 1))
	for i, en := range candidates {
		g.Go(func() error {
			lives[i], _ = e.getByID(ctx, reader, en.Object) // unread: wave 0, pruneOne reads it
			return nil
		})
	}
	_ = g.Wait()
	items := make([]*item, len(candidates))
	if e.cache == nil {
		known = make(map[object.ObjMetadata]*metav1.PartialObjectMetadata, len(candidates))
	}
	for i, en := range candidates {
		items[i] = &item{id: en.Object}
		if lives[i] == nil {
			continue
		}
		if known != nil {
			known[en.Object] = lives[i]
		}
		ann := make(map[string]any, 3)
		for _, k := range []string{WaveAnnotation, ArgoSyncWaveAnnotation, DependsOnAnnotation} {
			if v, ok := lives[i].Annotations[k]; ok {
				ann[k] = v
			}
		}
		// An annotation that does not parse orders nothing: the object was applied with it
		// by an older version, or by someone else; its prune goes by kind.
		if wave, deps, err := orderOf(ann); err == nil {
			items[i].pos.wave, items[i].deps = wave, deps
		}
	}
	if _, err := orderItems(items, ""); err != nil {
		for _, it := range items { // a cycle among the pruned: by wave only
			it.pos.step = 0
		}
	}
	return pruneStagesOrdered(candidates, items), known
}

// pruneStagesOrdered groups candidates by pruneRank, lowest first, and inside a rank by the
// position of their item (items[i] is candidates[i]'s), highest first.
func pruneStagesOrdered(candidates []inventory.Entry, items []*item) [][]inventory.Entry {
	idx := make([]int, len(candidates))
	for i := range idx {
		idx[i] = i
	}
	key := func(i int) (int, position) {
		return pruneRank(candidates[i].Object.GroupKind), items[i].pos
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		ra, pa := key(a)
		rb, pb := key(b)
		if ra != rb {
			return ra - rb
		}
		return pb.compare(pa)
	})
	var out [][]inventory.Entry
	for n, i := range idx {
		if n == 0 || func() bool { ra, pa := key(idx[n-1]); rb, pb := key(i); return ra != rb || pa != pb }() {
			out = append(out, nil)
		}
		out[len(out)-1] = append(out[len(out)-1], candidates[i])
	}
	return out
}
