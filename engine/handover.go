package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/fluxcd/pkg/ssa"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/inventory"
)

// Hand-over of field ownership. An object another GitOps tool or kubectl applied keeps that
// tool's managedFields entries when a Sync adopts it: a field later removed from the source
// would stay in the cluster, still owned by kustomize-controller, and the old tool's tracking
// labels would let it prune or fight over the object. So, before applying an object the run
// owns or may adopt (I11 decided first, on the same read), the engine sends at most one JSON
// patch that
//
//   - renames the main-resource entries of the managers the run may take over
//     (ApplyOptions.TakeOverManagers) to the run's field manager as an apply entry, merged
//     into its own (fluxcd/pkg/ssa PatchReplaceFieldsManagers): the next apply then owns those
//     fields and removes the ones the source no longer declares, as Flux does for kubectl;
//   - removes the old tools' tracking labels and annotations (trackingLabels,
//     trackingAnnotations) that the desired object does not itself declare;
//   - sets our owner annotation, so the object is claimed in the same write that hands its
//     fields over: a crash before the apply leaves an object that is ours (it was
//     inventoried ahead, I2) and that the next run applies, and no other Sync can adopt it
//     in between;
//   - tests metadata.uid and metadata.resourceVersion first, so it lands only on the very
//     object that was read and judged (a changed object fails the test and is read again).
//
// Nothing is sent when there is nothing to hand over (no request on the common path), for
// an object whose apply policy is SSAMerge, and in a dry-run. Managers not on the list (an
// HPA's kube-controller-manager, a mutating webhook) keep their fields; so do subresource
// entries (kubectl scale). The patch only edits metadata: no object is deleted or recreated,
// and a Deployment's generation moves only for its annotations (its Pods are not replaced).

// DefaultTakeOverManagers are the field managers whose fields a run takes over by default:
// Flux's controllers, Argo CD's, and kubectl's (client-side and server-side apply, edit,
// patch, label, annotate, ... and its legacy before-first-apply).
func DefaultTakeOverManagers() []string {
	return []string{
		"kustomize-controller", "helm-controller", // Flux
		"argocd-controller", "argocd-application-controller", // Argo CD (server-side apply; its controller's updates)
		"kubectl", "kubectl-*", "before-first-apply", // kubectl apply --server-side, kubectl-client-side-apply, kubectl-edit, ...
	}
}

// trackingLabels are the labels by which Flux finds (and prunes) the objects it applied.
var trackingLabels = []string{
	"kustomize.toolkit.fluxcd.io/name", "kustomize.toolkit.fluxcd.io/namespace",
	"helm.toolkit.fluxcd.io/name", "helm.toolkit.fluxcd.io/namespace",
	"fluxcd.io/sync-gc-mark",
}

// trackingAnnotations are Argo CD's tracking annotation, kubectl's client-side apply record
// (whose three-way merge would otherwise fight the new owner) and Flux's old checksums.
var trackingAnnotations = []string{
	"argocd.argoproj.io/tracking-id",
	lastAppliedAnnotation,
	"kustomize.toolkit.fluxcd.io/checksum", "fluxcd.io/sync-checksum",
}

// argoInstanceLabel is Argo CD's tracking label (its label tracking method). It is also a
// common label of charts, so it is removed only when an Argo CD manager wrote it and the
// desired object does not declare it.
const argoInstanceLabel = "app.kubernetes.io/instance"

// jsonOp is one operation of a JSON patch (RFC 6902).
type jsonOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// handOver sends the hand-over patch of it over live, read from the API server and judged
// ours to apply, and returns the object the API server answered (live itself when nothing
// was sent). An error is the patch's failure; a failed test (the object changed since the
// read) is stale: read it again.
func (r *applyRun) handOver(ctx context.Context, it *item, live *unstructured.Unstructured) (*unstructured.Unstructured, bool, error) {
	if r.opts.DryRun || r.ref.ID == "" {
		return live, false, nil
	}
	ops, err := handOverOps(it, live, r.opts.TakeOverManagers, r.fieldManager(), r.ref.ID)
	if err != nil || len(ops) == 0 {
		return live, false, err
	}
	body, err := json.Marshal(ops)
	if err != nil {
		return live, false, fmt.Errorf("hand-over: encode: %w", err)
	}
	if err := r.gate.pass(ctx); err != nil {
		return live, false, err
	}
	target := &unstructured.Unstructured{}
	target.SetGroupVersionKind(live.GroupVersionKind())
	target.SetNamespace(live.GetNamespace())
	target.SetName(live.GetName())
	err = r.e.client.Patch(ctx, target, client.RawPatch(types.JSONPatchType, body), client.FieldOwner(r.fieldManager()))
	if err != nil {
		stale := apierrors.IsInvalid(err) || apierrors.IsConflict(err) || apierrors.IsNotFound(err)
		return live, stale, fmt.Errorf("hand-over of field ownership: %w", err)
	}
	return target, false, nil
}

// handOverOps is the JSON patch that hands live over to manager for the inventory owner (see
// above), or nil when there is nothing to hand over.
func handOverOps(it *item, live *unstructured.Unstructured, takeOver []string, manager, owner string) ([]jsonOp, error) {
	if !handOverNeeded(it, live, takeOver, manager) {
		return nil, nil
	}
	if p, _, _ := it.ssaPolicy(); p == SSAMerge {
		return nil, nil
	}
	if p, _, _ := liveSSAPolicy(live); p == SSAMerge {
		return nil, nil
	}
	var ops []jsonOp
	if fms := takenOver(live, takeOver, it.kept, manager); len(fms) > 0 {
		patches, err := ssa.PatchReplaceFieldsManagers(live, fms, manager)
		if err != nil {
			return nil, fmt.Errorf("hand-over of field ownership: %w", err)
		}
		for _, p := range patches {
			ops = append(ops, jsonOp{Op: p.Operation, Path: p.Path, Value: p.Value})
		}
	}
	for _, p := range ssa.PatchRemoveLabels(live, undeclared(it, "labels", staleLabels(live))) {
		ops = append(ops, jsonOp{Op: p.Operation, Path: p.Path})
	}
	for _, p := range ssa.PatchRemoveAnnotations(live, undeclared(it, "annotations", trackingAnnotations)) {
		ops = append(ops, jsonOp{Op: p.Operation, Path: p.Path})
	}
	if len(ops) == 0 {
		return nil, nil
	}
	if live.GetAnnotations()[OwnerAnnotation] != owner {
		ops = append(ops, ownerOp(live, owner))
	}
	return append([]jsonOp{
		{Op: "test", Path: "/metadata/uid", Value: string(live.GetUID())},
		{Op: "test", Path: "/metadata/resourceVersion", Value: live.GetResourceVersion()},
	}, ops...), nil
}

// handOverNeeded reports whether live may have anything to hand over: a tracking label or
// annotation the desired object does not declare, or a main-resource entry of a listed
// manager. It reads live's metadata in place, decoding and copying nothing: every object a
// run reads is asked, and a run that changes nothing reads them all.
func handOverNeeded(it *item, live *unstructured.Unstructured, takeOver []string, manager string) bool {
	md, _ := live.Object["metadata"].(map[string]any)
	if present(it, "labels", md, trackingLabels) || present(it, "annotations", md, trackingAnnotations) ||
		present(it, "labels", md, []string{argoInstanceLabel}) {
		return true
	}
	entries, _ := md["managedFields"].([]any)
	for _, e := range entries {
		m, _ := e.(map[string]any)
		name, _ := m["manager"].(string)
		sub, _ := m["subresource"].(string)
		if sub == "" && !ownManager(name, manager) && listed(name, takeOver) && !namedIn(name, it.kept) {
			return true
		}
	}
	return false
}

// present reports whether the live metadata md carries in field (labels or annotations) one
// of keys that the desired object of it does not declare.
func present(it *item, field string, md map[string]any, keys []string) bool {
	live, _ := md[field].(map[string]any)
	if len(live) == 0 {
		return false
	}
	desired, _ := it.obj.Object["metadata"].(map[string]any)
	declared, _ := desired[field].(map[string]any)
	for _, k := range keys {
		if _, ok := live[k]; ok {
			if _, ok := declared[k]; !ok {
				return true
			}
		}
	}
	return false
}

// takenOver lists, as exact ssa.FieldManager matches, the main-resource entries of live
// whose manager is on the list: a name, or a prefix ending in "*". Converge's own managers,
// subresource entries and the managers an ignore rule keeps (kept) are never taken over.
func takenOver(live *unstructured.Unstructured, takeOver, kept []string, manager string) []ssa.FieldManager {
	var out []ssa.FieldManager
	for _, mf := range live.GetManagedFields() {
		if mf.Subresource != "" || ownManager(mf.Manager, manager) || !listed(mf.Manager, takeOver) || namedIn(mf.Manager, kept) {
			continue
		}
		fm := ssa.FieldManager{Name: mf.Manager, ExactMatch: true, OperationType: mf.Operation}
		if !slices.Contains(out, fm) {
			out = append(out, fm)
		}
	}
	return out
}

// listed reports whether manager is on the list: by name, or by a prefix ending in "*".
func listed(manager string, list []string) bool {
	if systemManager(manager) {
		return false // Kubernetes' own controllers keep their fields, whatever a Sync lists
	}
	for _, m := range list {
		if prefix, ok := strings.CutSuffix(m, "*"); ok && strings.HasPrefix(manager, prefix) || m == manager {
			return true
		}
	}
	return false
}

// staleLabels are the tracking labels to look for on live: Flux's, and Argo CD's instance
// label when an Argo CD manager wrote it.
func staleLabels(live *unstructured.Unstructured) []string {
	if _, ok := live.GetLabels()[argoInstanceLabel]; !ok {
		return trackingLabels
	}
	for _, mf := range live.GetManagedFields() {
		if strings.HasPrefix(mf.Manager, "argocd-") && ownsLabel(mf, argoInstanceLabel) {
			return append(slices.Clip(trackingLabels), argoInstanceLabel)
		}
	}
	return trackingLabels
}

// ownsLabel reports whether the managedFields entry mf owns the label key.
func ownsLabel(mf metav1.ManagedFieldsEntry, key string) bool {
	if mf.FieldsV1 == nil {
		return false
	}
	var f struct {
		Metadata struct {
			Labels map[string]json.RawMessage `json:"f:labels"`
		} `json:"f:metadata"`
	}
	if json.Unmarshal(mf.FieldsV1.Raw, &f) != nil {
		return false
	}
	_, ok := f.Metadata.Labels["f:"+key]
	return ok
}

// undeclared returns the keys that the desired object of it does not declare in its
// metadata field (labels or annotations): a key the source declares is never removed.
func undeclared(it *item, field string, keys []string) []string {
	md, _ := it.obj.Object["metadata"].(map[string]any)
	declared, _ := md[field].(map[string]any)
	var out []string
	for _, k := range keys {
		if _, ok := declared[k]; !ok {
			out = append(out, k)
		}
	}
	return out
}

// ownerOp sets the owner annotation of live to owner.
func ownerOp(live *unstructured.Unstructured, owner string) jsonOp {
	md, _ := live.Object["metadata"].(map[string]any)
	if ann, _ := md["annotations"].(map[string]any); ann == nil {
		return jsonOp{Op: "add", Path: "/metadata/annotations", Value: map[string]string{OwnerAnnotation: owner}}
	}
	return jsonOp{Op: "add", Path: "/metadata/annotations/" + inventory.PointerToken(OwnerAnnotation), Value: owner}
}

// handOverRecalled completes the apply of the memo's decision (applyRecalled), which read
// nothing: the apply's answer, applied, is the first sight of the object's managedFields
// this run has. When they show something to hand over (a commit applied over an object a
// manager newly on the list wrote, a tracking label put back), the object is read, handed
// over, and applied again, so the fields the source dropped go now rather than at the next
// read. Otherwise applied is returned as it is, at no cost.
func (r *applyRun) handOverRecalled(ctx context.Context, it *item, applied *metav1.PartialObjectMetadata) (*metav1.PartialObjectMetadata, error) {
	md, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&applied.ObjectMeta)
	if err != nil {
		return nil, err
	}
	if ops, err := handOverOps(it, &unstructured.Unstructured{Object: map[string]any{"metadata": md}},
		r.opts.TakeOverManagers, r.fieldManager(), r.ref.ID); err != nil || len(ops) == 0 {
		return applied, err
	}
	live, err := r.e.get(ctx, it.obj)
	if err != nil {
		return nil, err
	}
	if live == nil || live.GetUID() != applied.GetUID() {
		return nil, fmt.Errorf("hand-over: %s was deleted or replaced since its apply", Describe(it.id))
	}
	if err := r.mayTakeOver(it, live); err != nil {
		return nil, err // another inventory took it since the apply (I11): not ours to hand over
	}
	if _, _, err := r.handOver(ctx, it, live); err != nil {
		return nil, err
	}
	return r.e.apply(ctx, it.obj, applyAs{manager: r.fieldManager(), force: r.opts.ForceConflicts}, precondition{uid: live.GetUID()})
}

// memoKey is what the memo hashes with each desired object besides the object itself: the
// run's field manager, the managers it takes over and the fields it leaves alone
// (ApplyOptions.Ignore). A memo entry says an apply would change nothing; once one of these
// changes, an object the memo trusted must be read again, so that the fields of a manager
// newly on the list are handed over, and a field no longer ignored is set again.
func memoKey(opts ApplyOptions) string {
	key := fieldManagerOf(opts) + "\x00" + strings.Join(opts.TakeOverManagers, "\x00")
	for _, rule := range opts.Ignore {
		key += fmt.Sprintf("\x00%q %q %+v", rule.Paths, rule.Managers, rule.Target)
	}
	return key
}
