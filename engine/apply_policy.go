package engine

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The per-object apply policy (SSAAnnotation, Flux's FluxSSAAnnotation), as Flux's
// kustomize-controller honours it:
//
//   - SSAIgnore on the desired object skips it before any read (item.skip, as a disabled
//     reconcile); on the live object it skips it once read (livePolicy). Either way it is
//     never applied, and a live object carrying it is never pruned nor deleted with its Sync
//     (objectAnnotations.keep).
//   - SSAIfNotPresent on the desired object creates it when missing and leaves an existing
//     one as it is (skipped, still tracked, pruned when it leaves the set).
//   - SSAMerge applies the object without the hand-over of other managers' fields
//     (handover.go).
//
// An unknown value on the desired object fails that object before anything is read (the
// rest of the set is applied; the run then prunes nothing); on the live object it fails the
// object once read. With the watch cache, an annotation added to the live object counts
// from when the cache shows it: a run decided from the memo in between applies as before.
// Only annotations are read (Flux also matches labels).

// policyErr is the error of an unknown apply policy on the desired object, or nil.
func (it *item) policyErr() error {
	_, _, err := it.ssaPolicy()
	if err != nil {
		return terminal(err)
	}
	return nil
}

// ifNotPresent says the desired object is created when missing and never changed after.
func (it *item) ifNotPresent() bool {
	p, _, _ := it.ssaPolicy()
	return p == SSAIfNotPresent
}

// livePolicy decides the items whose apply policy leaves live, read from the API server and
// judged ours (or as the watch cache shows it, for the memo's decision), as it is (done): the live object's SSAIgnore, the desired object's
// SSAIfNotPresent, or an unknown policy on the live object (failed).
func livePolicy(it *item, live metav1.Object, out outcome) (_ outcome, done bool) {
	p, key, err := liveSSAPolicy(live)
	switch {
	case err != nil:
		return failed(out, terminal(err)), true
	case p == SSAIgnore:
		out.change.Action = ActionSkipped
		out.change.Message = "apply ignored by annotation " + key + ": " + SSAIgnore + " of the live object"
		out.uid = live.GetUID()
		return out, true
	case it.ifNotPresent():
		return notPatched(it, out, live), true
	}
	return out, false
}

// notPatched is out for an existing object whose desired copy says SSAIfNotPresent: skipped,
// tracked at live's UID, not waited for.
func notPatched(it *item, out outcome, live metav1.Object) outcome {
	_, key, _ := it.ssaPolicy()
	out.change.Action = ActionSkipped
	out.change.Message = "exists; not changed (annotation " + key + ": " + SSAIfNotPresent + ")"
	out.uid, out.rv, out.generation = live.GetUID(), live.GetResourceVersion(), live.GetGeneration()
	return out
}

// ssaPolicy is the desired object's apply policy (objectAnnotations.ssaPolicy), read in place:
// it is asked for every object of every run.
func (it *item) ssaPolicy() (policy, key string, err error) {
	c, f := it.annotation(SSAAnnotation), it.annotation(FluxSSAAnnotation)
	if c == "" && f == "" {
		return SSAOverride, "", nil
	}
	return objectAnnotations{SSAAnnotation: c, FluxSSAAnnotation: f}.ssaPolicy()
}

// liveSSAPolicy is the apply policy of a live object, read without copying its annotations.
func liveSSAPolicy(live metav1.Object) (policy, key string, err error) {
	var ann map[string]string
	if u, ok := live.(*unstructured.Unstructured); ok {
		md, _ := u.Object["metadata"].(map[string]any)
		raw, _ := md["annotations"].(map[string]any)
		c, _ := raw[SSAAnnotation].(string)
		f, _ := raw[FluxSSAAnnotation].(string)
		if c == "" && f == "" {
			return SSAOverride, "", nil
		}
		ann = map[string]string{SSAAnnotation: c, FluxSSAAnnotation: f}
	} else {
		ann = live.GetAnnotations()
	}
	return objectAnnotations(ann).ssaPolicy()
}
