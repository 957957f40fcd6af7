package v1alpha1

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/cli-utils/pkg/object"
)

// ConditionDrifted is True while a Sync whose drift policy is Report has objects that differ
// from the revision it applied (changed or deleted out of band); absent otherwise.
const ConditionDrifted = "Drifted"

// ReasonDriftDetected is the reason of ConditionDrifted=True.
const ReasonDriftDetected = "DriftDetected"

// DriftPolicy says what a Sync does with drift: an out-of-band change of an object it
// applied, found by a reconcile of the revision and spec it last applied.
// +kubebuilder:validation:Enum=Correct;Report
type DriftPolicy string

// The drift policies.
const (
	// DriftCorrect applies the object again, taking the changed fields back (the default).
	DriftCorrect DriftPolicy = "Correct"
	// DriftReport leaves the object as it is and reports it: status.drift, the Drifted
	// condition, an event, the converge_drifted_objects metric. A new revision or a change
	// of the spec applies everything again.
	DriftReport DriftPolicy = "Report"
)

// KindDriftPolicy is the drift policy of the objects of one kind.
type KindDriftPolicy struct {
	// Group is the kind's API group, "" for the core group.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Group string `json:"group,omitempty"`
	// Kind is the kind, such as Deployment.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +required
	Kind string `json:"kind"`
	// Policy is the drift policy of the kind's objects.
	// +required
	Policy DriftPolicy `json:"policy"`
}

// CorrectedDriftAnnotation, on a Sync's DriftCorrected event, holds the drift it took back
// as JSON: a list of DriftedObject, bounded as status.drift is. `converge tree` reads it from
// the newest such event.
const CorrectedDriftAnnotation = "converge.dev/corrected-drift"

// Bounds of status.drift.
const (
	// MaxDriftObjects is how many drifted objects status.drift lists.
	MaxDriftObjects = 20
	// MaxDriftFields is how many fields status.drift lists per object.
	MaxDriftFields = 5
)

// DriftStatus is the drift the last reconcile of the Sync's applied revision found and left
// as it is (drift policy Report); corrected drift is in events, not here.
type DriftStatus struct {
	// Objects are the drifted objects, at most 20, in apply order.
	// +kubebuilder:validation:MaxItems=20
	// +optional
	Objects []DriftedObject `json:"objects,omitempty"`
	// MoreObjects counts the drifted objects left out of Objects.
	// +optional
	MoreObjects int `json:"moreObjects,omitempty"`
}

// Count is the number of drifted objects, those left out of Objects included; 0 for nil.
func (d *DriftStatus) Count() int {
	if d == nil {
		return 0
	}
	return len(d.Objects) + d.MoreObjects
}

// DriftedObject is one object that differs from the applied revision.
type DriftedObject struct {
	// Group is the object's API group, "" for the core group.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Group string `json:"group,omitempty"`
	// Kind is the object's kind.
	// +kubebuilder:validation:MaxLength=63
	// +required
	Kind string `json:"kind"`
	// Namespace is the object's namespace, "" for a cluster-scoped object.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// Name is the object's name.
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
	// Missing says the object was deleted out of band (and not recreated).
	// +optional
	Missing bool `json:"missing,omitempty"`
	// Fields are the fields that differ, at most 5.
	// +kubebuilder:validation:MaxItems=5
	// +optional
	Fields []DriftedField `json:"fields,omitempty"`
	// MoreFields counts the differing fields left out of Fields.
	// +optional
	MoreFields int `json:"moreFields,omitempty"`
}

// DriftedField is one field of a drifted object and who changed it.
type DriftedField struct {
	// Path names the field: spec.replicas, metadata.labels.team,
	// spec.template.spec.containers[name=web].image.
	// +kubebuilder:validation:MaxLength=512
	// +required
	Path string `json:"path"`
	// Manager is the field manager that owns the field in the live object now (from its
	// managedFields): kubectl-edit, kubectl-scale, another controller. Empty when none does
	// (the field was removed).
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Manager string `json:"manager,omitempty"`
}

// String names the object and how it drifted, as conditions and events show it:
// "Deployment apps/web: spec.replicas (kubectl-edit), metadata.labels.team", "ConfigMap
// apps/settings: deleted".
func (d DriftedObject) String() string {
	var b strings.Builder
	b.WriteString(d.Kind + " ")
	if d.Namespace != "" {
		b.WriteString(d.Namespace + "/")
	}
	b.WriteString(d.Name + ": ")
	b.WriteString(d.Change())
	return b.String()
}

// ID is the object's identity in an inventory.
func (d DriftedObject) ID() object.ObjMetadata {
	return object.ObjMetadata{GroupKind: schema.GroupKind{Group: d.Group, Kind: d.Kind}, Namespace: d.Namespace, Name: d.Name}
}

// Change says how the object drifted, as converge tree shows it: "spec.replicas
// (kubectl-edit), metadata.labels.team", "deleted".
func (d DriftedObject) Change() string {
	var b strings.Builder
	if d.Missing {
		b.WriteString("deleted")
		return b.String()
	}
	for i, f := range d.Fields {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(f.Path)
		if f.Manager != "" {
			b.WriteString(" (" + f.Manager + ")")
		}
	}
	if d.MoreFields > 0 {
		fmt.Fprintf(&b, " and %d more fields", d.MoreFields)
	}
	if len(d.Fields) == 0 && d.MoreFields == 0 {
		b.WriteString("changed")
	}
	return b.String()
}

// DescribeDrift names the first n of objects (with their fields and managers) and counts
// the rest, more of them left out before: "Deployment apps/web: spec.replicas
// (kubectl-edit); and 3 more objects".
func DescribeDrift(objects []DriftedObject, more, n int) string {
	parts := make([]string, 0, n+1)
	for i, o := range objects {
		if i == n {
			break
		}
		parts = append(parts, o.String())
	}
	if rest := len(objects) - len(parts) + more; rest > 0 {
		parts = append(parts, fmt.Sprintf("and %d more objects", rest))
	}
	return strings.Join(parts, "; ")
}
