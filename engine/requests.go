package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The engine's requests for one object: read, apply (answered as metadata), dry-run (answered
// in full), and delete-and-wait for a recreate.

// get reads the live object of u from the API server; nil when it does not exist.
func (e *Engine) get(ctx context.Context, u *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(u.GroupVersionKind())
	err := e.client.Get(ctx, client.ObjectKeyFromObject(u), live)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return live, nil
}

// applyAs is how an apply claims the fields it sends: as field manager manager, and, with
// force, taking the fields that other managers own (client.ForceOwnership) rather than
// failing on the conflict. A named field, so a call site never reads apply(…, true).
type applyAs struct {
	manager string
	force   bool
}

// apply server-side applies u for real as as says, and returns the server's answer as metadata only: the engine keeps only
// the resourceVersion, UID and generation of an apply, and a metadata answer (protobuf) costs
// the API server and the engine a fraction of the full object's JSON. u is not modified; it
// never carries a resourceVersion or UID of its own (prepare strips them): pre adds them, so
// that the apply lands only on the object the run checked (precondition).
func (e *Engine) apply(ctx context.Context, u *unstructured.Unstructured, as applyAs, pre precondition) (*metav1.PartialObjectMetadata, error) {
	gvk := u.GroupVersionKind()
	m, err := e.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(pre.on(u.Object))
	if err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	mc, err := e.meta.forResource(m.Resource)
	if err != nil {
		return nil, err
	}
	var ri metadata.ResourceInterface = mc.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ri = mc.Resource(m.Resource).Namespace(u.GetNamespace())
	}
	return ri.Patch(ctx, u.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: as.manager, Force: &as.force})
}

// precondition is what an apply requires of the live object, so that it lands only on the
// object whose ownership the run checked (I11, I14). A server-side apply creates the object
// when it is missing and updates it otherwise, whoever created it: without a precondition,
// two sets that both saw an object missing both "create" it, the second one silently
// rewriting the first's owner annotation (they share the field manager, which owns it), and
// an apply decided on a stale cache lands on whatever object now has that name.
type precondition struct {
	// absent: the object must not exist; the apply is a create. Sent as a resourceVersion
	// no object can have: a create ignores it, an update of an existing object fails with
	// 409 Conflict.
	absent bool
	// uid: the live object must have this UID (a 409 Conflict otherwise); "" for none.
	uid types.UID
}

// absentResourceVersion is the resourceVersion of a create-only apply: the largest etcd
// revision, which no stored object reaches.
const absentResourceVersion = "18446744073709551615"

// on returns obj with the precondition in its metadata: obj itself when there is none,
// otherwise a copy that shares everything but the top level and the metadata map.
func (p precondition) on(obj map[string]any) map[string]any {
	if !p.absent && p.uid == "" {
		return obj
	}
	out := maps.Clone(obj)
	md, _ := obj["metadata"].(map[string]any)
	md = maps.Clone(md)
	if md == nil {
		md = map[string]any{}
	}
	if p.absent {
		md["resourceVersion"] = absentResourceVersion
	}
	if p.uid != "" {
		md["uid"] = string(p.uid)
	}
	out["metadata"] = md
	return out
}

// isPreconditionFailed reports whether err is a write's failed precondition (the object was
// created, deleted or replaced since it was read), not a field manager conflict or an invalid
// object: a 409 without field manager conflicts (a resourceVersion or a delete's UID
// precondition; an apply's UID naming no existing object), or a 422 on metadata.uid alone (an
// apply's UID naming another object: the server refuses to change an object's UID).
func isPreconditionFailed(err error) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return false
	}
	var causes []metav1.StatusCause
	if d := st.Status().Details; d != nil {
		causes = d.Causes
	}
	switch {
	case apierrors.IsConflict(err):
		for _, c := range causes {
			if c.Type == metav1.CauseTypeFieldManagerConflict {
				return false
			}
		}
		return true
	case apierrors.IsInvalid(err):
		for _, c := range causes {
			if c.Field != "metadata.uid" {
				return false
			}
		}
		return len(causes) > 0
	}
	return false
}

// metadataClients are the metadata clients of the applies, one per resource: each has its
// own client-side rate limiter (the config's QPS and Burst), as controller-runtime gives each
// kind its own client. One shared client would hold every kind to a single kind's budget.
type metadataClients struct {
	cfg        *rest.Config
	httpClient *http.Client
	mu         sync.Mutex
	clients    map[schema.GroupVersionResource]metadata.Interface
}

// forResource returns the metadata client of gvr, made on first use.
func (m *metadataClients) forResource(gvr schema.GroupVersionResource) (metadata.Interface, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.clients[gvr]; ok {
		return c, nil
	}
	c, err := metadata.NewForConfigAndClient(m.cfg, m.httpClient)
	if err != nil {
		return nil, fmt.Errorf("metadata client for %s: %w", gvr, err)
	}
	if m.clients == nil {
		m.clients = map[schema.GroupVersionResource]metadata.Interface{}
	}
	m.clients[gvr] = c
	return c, nil
}

// dryRunApply server-side dry-runs the apply of u as as says; u becomes the server's full
// answer, which the run compares with the live object. It was serverSideApply(…, dryRun,
// force), only ever called with dryRun true: the real applies go through apply.
func (e *Engine) dryRunApply(ctx context.Context, u *unstructured.Unstructured, as applyAs) error {
	opts := []client.ApplyOption{client.FieldOwner(as.manager), client.DryRunAll}
	if as.force {
		opts = append(opts, client.ForceOwnership)
	}
	return e.client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), opts...)
}

// recreate deletes live with UID and resourceVersion preconditions (exactly the object whose
// ownership was checked: a 409 means it changed since, and is read again) and waits until
// it is gone, so it can be created again with the changed immutable fields.
func (e *Engine) recreate(ctx context.Context, live *unstructured.Unstructured, timeout time.Duration) error {
	uid, rv := live.GetUID(), live.GetResourceVersion()
	err := e.client.Delete(ctx, live, client.Preconditions{UID: &uid, ResourceVersion: &rv},
		client.PropagationPolicy(metav1.DeletePropagationBackground))
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("recreate: delete: %w", err)
	}
	if timeout <= 0 {
		timeout = time.Minute
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		cur, err := e.get(ctx, live)
		if err != nil {
			return false, err
		}
		return cur == nil || cur.GetUID() != uid, nil
	})
	if err != nil {
		return fmt.Errorf("recreate: wait for deletion: %w", err)
	}
	return nil
}
