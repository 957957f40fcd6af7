package engine

import "strings"

// Flux's and Argo CD's per-object annotations, honoured as written beside Converge's own, so a
// set moved from either tool keeps what its objects asked for.
const (
	// FluxPruneAnnotation: disabled keeps the object when it leaves the set and when the Sync
	// is deleted, as PruneAnnotation.
	FluxPruneAnnotation = "kustomize.toolkit.fluxcd.io/prune"
	// FluxReconcileAnnotation: disabled leaves the object alone, as ReconcileAnnotation.
	FluxReconcileAnnotation = "kustomize.toolkit.fluxcd.io/reconcile"
	// FluxForceAnnotation: enabled recreates the object when an immutable field changed, as
	// ForceAnnotation.
	FluxForceAnnotation = "kustomize.toolkit.fluxcd.io/force"
	// ArgoSyncOptionsAnnotation is a comma-separated list of Argo CD sync options; those that
	// mean what a Converge annotation means are honoured: Prune=false (kept when it leaves
	// the set), Delete=false (kept when the Sync is deleted), Replace=true (recreated when an
	// immutable field changed).
	ArgoSyncOptionsAnnotation = "argocd.argoproj.io/sync-options"
)

// objectAnnotations reads what an object's annotations ask of the engine, whichever tool's
// spelling they use.
type objectAnnotations map[string]string

// keepOnPrune says the object stays when it leaves the set, and names the annotation that
// says so ("" when none does).
func (a objectAnnotations) keepOnPrune() string {
	return a.keep("Prune=false")
}

// keepOnDelete says the object stays when its set is deleted (the Sync's deletion policy
// Delete), and names the annotation that says so.
func (a objectAnnotations) keepOnDelete() string {
	return a.keep("Delete=false")
}

func (a objectAnnotations) keep(argoOption string) string {
	switch {
	case a[PruneAnnotation] == PruneDisabled:
		return PruneAnnotation
	case a[FluxPruneAnnotation] == PruneDisabled:
		return FluxPruneAnnotation
	case a.argoOption(argoOption):
		return ArgoSyncOptionsAnnotation
	}
	return ""
}

// reconcileDisabled says the engine leaves the object alone, and names the annotation.
func (a objectAnnotations) reconcileDisabled() string {
	switch {
	case a[ReconcileAnnotation] == ReconcileDisabled:
		return ReconcileAnnotation
	case a[FluxReconcileAnnotation] == ReconcileDisabled:
		return FluxReconcileAnnotation
	}
	return ""
}

// forceEnabled says the object may be recreated when an immutable field changed.
func (a objectAnnotations) forceEnabled() bool {
	return a[ForceAnnotation] == ForceEnabled || a[FluxForceAnnotation] == ForceEnabled || a.argoOption("Replace=true")
}

// argoOption says the Argo CD sync options list opt (options are compared as Argo CD
// does: trimmed, case-sensitive).
func (a objectAnnotations) argoOption(opt string) bool {
	for o := range strings.SplitSeq(a[ArgoSyncOptionsAnnotation], ",") {
		if strings.TrimSpace(o) == opt {
			return true
		}
	}
	return false
}
