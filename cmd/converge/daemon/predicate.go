package daemon

import (
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// syncChanged passes the Sync events that need a reconcile: another Sync under the same name
// (UID), a new generation (spec), a changed annotation (reconcile-now), deletion. Status-only
// updates, such as our own status writes, do not retrigger a reconcile.
type syncChanged struct{ predicate.Funcs }

func (syncChanged) Update(e event.UpdateEvent) bool {
	o, n := e.ObjectOld, e.ObjectNew
	if o == nil || n == nil {
		return true
	}
	return o.GetUID() != n.GetUID() || // a relist can fold a delete and a re-create into one update
		o.GetGeneration() != n.GetGeneration() ||
		o.GetAnnotations()[v1alpha1.RequestedAtAnnotation] != n.GetAnnotations()[v1alpha1.RequestedAtAnnotation] ||
		!n.GetDeletionTimestamp().IsZero()
}

func (syncChanged) Create(event.CreateEvent) bool   { return true }
func (syncChanged) Delete(event.DeleteEvent) bool   { return false }
func (syncChanged) Generic(event.GenericEvent) bool { return true }
