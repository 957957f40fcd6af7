package engine

import (
	"context"
	"maps"
	"sync"

	"golang.org/x/sync/errgroup"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/cli-utils/pkg/object"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// listPageSize bounds one page of the survey's LISTs.
const listPageSize = 500

// survey asks the API server, with one LIST per kind and namespace, what the run would
// otherwise read object by object with a GET, for the items of one chunk:
//
//   - items the stored inventory does not hold (new objects, in the common case): whether
//     they exist, from a metadata-only LIST. Such an item, listed as missing, can be applied
//     at once: nothing is there to adopt by mistake (I11), which is as true as a GET just
//     before the apply would make it;
//   - items it holds whose live object the run must read (without the watch path, all of
//     them; with it, those the memo knows nothing of, as after a restart): their live
//     objects, from a full LIST, when there are two or more and the set's items of the kind
//     and namespace in this stage (shares, all chunks together) are at least a quarter of
//     what the metadata LIST found.
//
// A kind and namespace that an earlier chunk of the run listed is listed in full at once,
// without the metadata LIST, when the share rule held on the size that LIST found: the full
// LIST shows which items exist as well (a kind split across two chunks costs one LIST more,
// not a GET per item of the smaller part).
//
// It returns, per surveyed item, its live object, or nil when it does not exist; items found
// existing but not listed in full are left out (the run reads them itself). A kind and
// namespace with fewer than two such items is left out too: one GET is no dearer than one
// LIST. CRDs are never listed. The
// answers come from the API server, never from the watch cache, so a stale cache cannot hide
// someone else's object. It runs per stage, after the CRDs of earlier stages are Established,
// so kinds those CRDs define can be listed too. Kinds that cannot be listed (RBAC, not
// served) are left out: their items take the per-object path.
func (r *applyRun) survey(ctx context.Context, items []*item, shares map[surveyKey]int) map[object.ObjMetadata]*unstructured.Unstructured {
	groups := map[surveyKey]*surveyWanted{}
	for _, it := range items {
		g, isNew, ok := r.surveyable(it)
		if !ok {
			continue
		}
		w := groups[g]
		if w == nil {
			w = &surveyWanted{ids: map[string]object.ObjMetadata{}}
			groups[g] = w
		}
		w.ids[it.id.Name] = it.id
		if isNew {
			w.new++
		} else {
			w.full++
		}
	}
	var mu sync.Mutex // guards listed
	listed := map[object.ObjMetadata]*unstructured.Unstructured{}
	var eg errgroup.Group // the groups' LISTs in parallel: each stage and chunk waits for them
	eg.SetLimit(max(r.opts.Concurrency, 1))
	for g, w := range groups {
		if w.full+w.new < 2 {
			continue // one GET is no dearer than one LIST
		}
		eg.Go(func() error {
			found := r.surveyGroup(ctx, g, w, max(shares[g]-len(w.ids), 0))
			mu.Lock()
			defer mu.Unlock()
			maps.Copy(listed, found)
			return nil
		})
	}
	_ = eg.Wait() // a group that cannot be listed is left out
	return listed
}

// surveyKey is a kind and namespace the survey lists.
type surveyKey struct {
	gvk schema.GroupVersionKind
	ns  string
}

// surveyWanted is what the survey wants of one kind and namespace in one chunk.
type surveyWanted struct {
	ids  map[string]object.ObjMetadata // by name
	full int                           // inventoried items whose live object is wanted
	new  int                           // items the inventory does not hold
}

// surveyable returns the kind and namespace under which the survey lists it, and whether the
// stored inventory does not hold it; ok is false for an item the survey leaves out.
func (r *applyRun) surveyable(it *item) (g surveyKey, isNew, ok bool) {
	if it.pendingErr != nil || it.pending && r.opts.DryRun || it.id.GroupKind == crdGK {
		// Not listable (a kind not served yet), or not worth listing: a cluster's CRDs
		// can be large, and a set holds few of them.
		return g, false, false
	}
	isNew = !it.stored
	if !isNew && r.listed.known != nil && r.listed.known(it) {
		return g, false, false // the watched view decides it from the cache and the memo
	}
	return surveyKey{it.gvk, it.id.Namespace}, isNew, true
}

// surveyShares counts, per kind and namespace, the items of one stage the survey would list
// (all its chunks together): the set's share of the kind there, for the quarter rule.
func (r *applyRun) surveyShares(items []*item) map[surveyKey]int {
	shares := map[surveyKey]int{}
	for _, it := range items {
		if g, _, ok := r.surveyable(it); ok {
			shares[g]++
		}
	}
	return shares
}

// surveySizes remembers, per kind and namespace, how many objects the run's last LIST of it
// found: a later chunk decides the quarter rule on it instead of listing the names again.
type surveySizes struct {
	mu sync.Mutex
	n  map[surveyKey]int
}

func (s *surveySizes) get(g surveyKey) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.n[g]
	return n, ok
}

func (s *surveySizes) set(g surveyKey, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == nil {
		s.n = map[surveyKey]int{}
	}
	s.n[g] = n
}

// surveyGroup lists the objects of g for the items w wants (see survey); elsewhere is how many
// items of g the stage's other chunks hold.
func (r *applyRun) surveyGroup(ctx context.Context, g surveyKey, w *surveyWanted, elsewhere int) map[object.ObjMetadata]*unstructured.Unstructured {
	listed := map[object.ObjMetadata]*unstructured.Unstructured{}
	if size, known := r.sizes.get(g); known && w.full >= 2 && 4*(len(w.ids)+elsewhere) >= size {
		// An earlier chunk listed g: the size it found decides (against all the wanted items,
		// as which of them exist is not known before this LIST), and the full LIST alone says
		// which items exist (an item it does not show does not exist), as the names-only LIST
		// would.
		lives, n, err := r.e.listLive(ctx, g.gvk, g.ns, w.ids)
		if err != nil {
			return listed
		}
		r.sizes.set(g, n)
		for name, id := range w.ids {
			listed[id] = lives[name] // nil: not listed, so missing
		}
		return listed
	}
	existing, err := r.e.listNames(ctx, g.gvk, g.ns)
	if err != nil {
		return listed
	}
	r.sizes.set(g, len(existing))
	present := 0
	for name, id := range w.ids {
		if existing[name] {
			present++
		} else {
			listed[id] = nil
		}
	}
	// The live objects are listed in full only when the set's objects are a good share of
	// the kind in the namespace (at least a quarter, counting the stage's other chunks): a
	// LIST returns every object of it, and a namespace may hold many, or large, objects of
	// others (Helm's release Secrets, for one). Otherwise the run reads them one by one.
	if w.full < 2 || 4*(present+elsewhere) < len(existing) {
		return listed
	}
	lives, _, err := r.e.listLive(ctx, g.gvk, g.ns, w.ids)
	if err != nil {
		return listed
	}
	for name, id := range w.ids {
		if l := lives[name]; l != nil && existing[name] {
			listed[id] = l
		}
	}
	return listed
}

// listNames returns the names of the objects of gvk in namespace ns ("" for cluster-scoped
// kinds), read page by page from the API server as metadata only.
func (e *Engine) listNames(ctx context.Context, gvk schema.GroupVersionKind, ns string) (map[string]bool, error) {
	names := map[string]bool{}
	err := e.listPages(ctx, gvk, ns, func() client.ObjectList {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		return list
	}, func(l client.ObjectList) {
		for _, o := range l.(*metav1.PartialObjectMetadataList).Items {
			names[o.Name] = true
		}
	})
	return names, err
}

// listLive returns the live objects of gvk in namespace ns whose names are in want, and how
// many objects of gvk it listed there, read page by page from the API server.
func (e *Engine) listLive(ctx context.Context, gvk schema.GroupVersionKind, ns string,
	want map[string]object.ObjMetadata) (map[string]*unstructured.Unstructured, int, error) {
	lives := map[string]*unstructured.Unstructured{}
	n := 0
	err := e.listPages(ctx, gvk, ns, func() client.ObjectList {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		return list
	}, func(l client.ObjectList) {
		items := l.(*unstructured.UnstructuredList).Items
		n += len(items)
		for i := range items {
			if _, ok := want[items[i].GetName()]; ok {
				u := items[i] // not a pointer into the page, which can then be freed
				lives[u.GetName()] = &u
			}
		}
	})
	return lives, n, err
}

// listPages lists gvk in ns page by page (listPageSize), handing each page to each.
func (e *Engine) listPages(ctx context.Context, gvk schema.GroupVersionKind, ns string,
	newList func() client.ObjectList, each func(client.ObjectList)) error {
	opts := []client.ListOption{client.Limit(listPageSize)}
	if ns != "" {
		opts = append(opts, client.InNamespace(ns))
	}
	cont := ""
	for {
		list := newList()
		if err := e.client.List(ctx, list, append(opts, client.Continue(cont))...); err != nil {
			return err
		}
		each(list)
		if cont = list.GetContinue(); cont == "" {
			return nil
		}
	}
}
