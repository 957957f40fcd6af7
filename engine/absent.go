package engine

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/cli-utils/pkg/object"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// listPageSize bounds one page of findAbsent's metadata LISTs.
const listPageSize = 500

// findAbsent asks the API server which of items do not exist, with one metadata-only LIST
// per kind and namespace holding at least two items the stored inventory does not hold (the
// others exist or were ours; a lone item is read with its own GET, which costs the same). Such an item can be applied at once: nothing is there to adopt by
// mistake (I11), which is as true as a GET just before the apply would make it, for one
// request per kind and namespace instead of one per object. The answer comes from the API
// server, never from the watch cache, so a stale cache cannot hide someone else's object.
// It runs per stage, after the CRDs of earlier stages are Established, so kinds those CRDs
// define can be listed too. Kinds that cannot be listed (RBAC, not served) are left out:
// their items take the per-object path.
func (r *applyRun) findAbsent(ctx context.Context, items []*item) map[object.ObjMetadata]bool {
	type group struct {
		gvk schema.GroupVersionKind
		ns  string
	}
	wanted := map[group]map[string]object.ObjMetadata{}
	for _, it := range items {
		if it.pendingErr != nil || r.old.Has(it.id) {
			continue
		}
		g := group{it.obj.GroupVersionKind(), it.id.Namespace}
		if wanted[g] == nil {
			wanted[g] = map[string]object.ObjMetadata{}
		}
		wanted[g][it.id.Name] = it.id
	}
	absent := map[object.ObjMetadata]bool{}
	for g, names := range wanted {
		if len(names) < 2 {
			continue // one GET is no dearer than one LIST
		}
		existing, err := r.e.listNames(ctx, g.gvk, g.ns)
		if err != nil {
			continue
		}
		for name, id := range names {
			if !existing[name] {
				absent[id] = true
			}
		}
	}
	return absent
}

// listNames returns the names of the objects of gvk in namespace ns ("" for cluster-scoped
// kinds), read page by page from the API server as metadata only.
func (e *Engine) listNames(ctx context.Context, gvk schema.GroupVersionKind, ns string) (map[string]bool, error) {
	names := map[string]bool{}
	opts := []client.ListOption{client.Limit(listPageSize)}
	if ns != "" {
		opts = append(opts, client.InNamespace(ns))
	}
	cont := ""
	for {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := e.client.List(ctx, list, append(opts, client.Continue(cont))...); err != nil {
			return nil, err
		}
		for _, o := range list.Items {
			names[o.Name] = true
		}
		if cont = list.GetContinue(); cont == "" {
			return names, nil
		}
	}
}
