package daemon

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/cli-utils/pkg/object"

	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/status"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// Event reasons of a reconcile that found drift.
const (
	reasonDrifted        = "Drifted"
	reasonDriftCorrected = "DriftCorrected"
)

// maxCorrectedDriftBytes bounds the JSON of the corrected drift a DriftCorrected event
// carries (v1alpha1.CorrectedDriftAnnotation): objects are left out from the end to fit.
const maxCorrectedDriftBytes = 64 << 10

// driftEventObjects is how many drifted objects an event names.
const driftEventObjects = 5

// driftOptions are the engine's drift options for a reconcile of s at revision. Only a
// reconcile of the revision and the generation s last applied successfully, which is also
// the revision it last attempted, detects drift: it has nothing new to apply, so what it
// would change was changed out of band. (A branch reset to the applied revision after
// another one was partly applied is no drift: the last attempt was that other revision.)
// All of it comes from the status, so a restarted daemon tells the same. Any other
// reconcile (a new commit, an edited spec, such as a move from Report to Correct) applies
// every object, as Argo CD's automated sync does, and corrects drift on the way.
func driftOptions(s *v1alpha1.Sync, revision string) engine.DriftOptions {
	st := s.Status
	if revision == "" || st.LastAppliedRevision != revision || st.LastAttemptedRevision != revision ||
		st.LastAppliedGeneration != s.Generation || st.LastAppliedGeneration == 0 {
		return engine.DriftOptions{}
	}
	d := engine.DriftOptions{Detect: true}
	if reportsAny(s) {
		d.Report = func(id object.ObjMetadata) bool { return driftPolicyOf(s.Spec, id) == v1alpha1.DriftReport }
	}
	return d
}

// reportsAny reports whether some object of s may have drift policy Report.
func reportsAny(s *v1alpha1.Sync) bool {
	if s.Spec.DriftPolicy == v1alpha1.DriftReport {
		return true
	}
	for _, k := range s.Spec.DriftPolicyKinds {
		if k.Policy == v1alpha1.DriftReport {
			return true
		}
	}
	return false
}

// driftPolicyOf is the drift policy of the object id under spec: its kind's entry of
// driftPolicyKinds, else driftPolicy, else Correct.
func driftPolicyOf(spec v1alpha1.SyncSpec, id object.ObjMetadata) v1alpha1.DriftPolicy {
	for _, k := range spec.DriftPolicyKinds {
		if k.Group == id.GroupKind.Group && k.Kind == id.GroupKind.Kind {
			return k.Policy
		}
	}
	if spec.DriftPolicy == "" {
		return v1alpha1.DriftCorrect
	}
	return spec.DriftPolicy
}

// driftedObjects converts the engine's drifted objects that corrected says (corrected or
// left as they are) into the API's, at most limit of them (0: all), with at most
// MaxDriftFields fields each; more counts those left out. A path names list elements by
// their keys, which a substituted or decrypted value may be: each is given to redact before
// it is cut to its bound, so that no cut value escapes it.
func driftedObjects(drift []engine.DriftedObject, corrected bool, limit int, redact func(string) string) (out []v1alpha1.DriftedObject, more int) {
	for _, d := range drift {
		if d.Corrected != corrected {
			continue
		}
		if limit > 0 && len(out) == limit {
			more++
			continue
		}
		o := v1alpha1.DriftedObject{Group: d.Object.GroupKind.Group, Kind: d.Object.GroupKind.Kind,
			Namespace: d.Object.Namespace, Name: d.Object.Name, Missing: d.Missing, MoreFields: d.MoreFields}
		for i, f := range d.Fields {
			if i == v1alpha1.MaxDriftFields {
				o.MoreFields += len(d.Fields) - i
				break
			}
			o.Fields = append(o.Fields, v1alpha1.DriftedField{Path: truncate(redact(f.Path), 500), Manager: truncate(f.Manager, 120)})
		}
		out = append(out, o)
	}
	return out, more
}

// recordDrift records in o the drift res found and left as it is (status.drift, the
// Drifted condition), and tells of it in events: Drifted for what was left, DriftCorrected
// for what was taken back.
func (r *reconciler) recordDrift(s *v1alpha1.Sync, o *status.Outcome, revision string, res *engine.Result) {
	o.DriftKnown = true
	redact := func(text string) string { return r.redact(s, text) }
	if left, more := driftedObjects(res.Drift, false, v1alpha1.MaxDriftObjects, redact); len(left) > 0 {
		o.Drift = &v1alpha1.DriftStatus{Objects: left, MoreObjects: more}
		r.events.Event(s, corev1.EventTypeWarning, reasonDrifted, truncate(fmt.Sprintf("revision %s: %s drifted, left so (driftPolicy Report): %s",
			revision, countObjects(len(left)+more), r.redact(s, v1alpha1.DescribeDrift(left, more, driftEventObjects))), 1024))
	}
	if fixed, more := driftedObjects(res.Drift, true, driftEventObjects, redact); len(fixed) > 0 {
		kept, _ := driftedObjects(res.Drift, true, v1alpha1.MaxDriftObjects, redact)
		r.events.AnnotatedEventf(s, correctedDriftAnnotation(kept), corev1.EventTypeNormal, reasonDriftCorrected, "%s", truncate(fmt.Sprintf("revision %s: drift of %s corrected: %s",
			revision, countObjects(len(fixed)+more), r.redact(s, v1alpha1.DescribeDrift(fixed, more, driftEventObjects))), 1024))
	}
}

// correctedDriftAnnotation is the annotation of a DriftCorrected event that carries the
// objects it corrected, for converge tree: their JSON, bounded to maxCorrectedDriftBytes (an
// event over the API server's annotation limit would be refused whole) by leaving objects
// out from the end; nil when none fits.
func correctedDriftAnnotation(objs []v1alpha1.DriftedObject) map[string]string {
	for ; len(objs) > 0; objs = objs[:len(objs)-1] {
		if b, err := json.Marshal(objs); err == nil && len(b) <= maxCorrectedDriftBytes {
			return map[string]string{v1alpha1.CorrectedDriftAnnotation: string(b)}
		}
	}
	return nil
}

// driftNote is what the Ready message says of drift left as it is: nothing when there is
// none. It counts the objects only, so the same drift found again writes nothing.
func driftNote(o status.Outcome) string {
	if o.Drift == nil {
		return ""
	}
	return fmt.Sprintf("; drift reported, not corrected (driftPolicy Report): %s, see status.drift",
		countObjects(o.Drift.Count()))
}
