package engine

import (
	"fmt"
	"strings"
)

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
	// SSAAnnotation is the apply policy of one object, as Flux's FluxSSAAnnotation (which is
	// honoured as written; Converge's wins when both are set). Values, compared without
	// regard to case as Flux does: SSAOverride (the default), SSAMerge, SSAIfNotPresent,
	// SSAIgnore. Any other value fails the object with an error naming it.
	SSAAnnotation = "converge.dev/ssa"
	// FluxSSAAnnotation is Flux's spelling of SSAAnnotation.
	FluxSSAAnnotation = "kustomize.toolkit.fluxcd.io/ssa"
)

// The values of SSAAnnotation.
const (
	// SSAOverride applies the object and takes over the fields of the managers the run may
	// take over (ApplyOptions.TakeOverManagers): the default.
	SSAOverride = "Override"
	// SSAMerge applies the object without handing other managers' fields over and without
	// cleaning another tool's tracking metadata: fields others added stay theirs. Set on the
	// desired object or on the live one.
	SSAMerge = "Merge"
	// SSAIfNotPresent creates the object when it is missing and never changes it once it
	// exists (a Secret or a webhook configuration another controller fills in). Set on the
	// desired object. It is pruned like any other.
	SSAIfNotPresent = "IfNotPresent"
	// SSAIgnore never applies the object, and never prunes or deletes it while the live
	// object carries it. Set on the desired object or on the live one.
	SSAIgnore = "Ignore"
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
	if p, key, _ := a.ssaPolicy(); p == SSAIgnore { // as Flux: an ignored object is never deleted
		return key
	}
	return ""
}

// LeftAloneBy names the annotation of an object's annotations that makes the engine leave
// it alone (never applied, inventoried or pruned): a reconcile annotation set to disabled,
// Flux's or Converge's, or the apply policy Ignore; "" when none does.
func LeftAloneBy(annotations map[string]string) string {
	return objectAnnotations(annotations).reconcileDisabled()
}

// reconcileDisabled says the engine leaves the object alone, and names the annotation: a
// reconcile annotation set to disabled, or the apply policy SSAIgnore.
func (a objectAnnotations) reconcileDisabled() string {
	switch {
	case a[ReconcileAnnotation] == ReconcileDisabled:
		return ReconcileAnnotation
	case a[FluxReconcileAnnotation] == ReconcileDisabled:
		return FluxReconcileAnnotation
	}
	if p, key, _ := a.ssaPolicy(); p == SSAIgnore {
		return key
	}
	return ""
}

// ssaPolicy is the object's apply policy (SSAAnnotation, else FluxSSAAnnotation) in its
// canonical spelling, and the annotation that sets it; SSAOverride and "" when none does.
// An unknown value is an error naming the annotation and the values it may take; the policy
// is then SSAOverride.
func (a objectAnnotations) ssaPolicy() (policy, key string, err error) {
	for _, key := range []string{SSAAnnotation, FluxSSAAnnotation} {
		v := a[key]
		if v == "" { // unset, or empty as Flux reads it
			continue
		}
		for _, p := range []string{SSAOverride, SSAMerge, SSAIfNotPresent, SSAIgnore} {
			if strings.EqualFold(strings.TrimSpace(v), p) {
				return p, key, nil
			}
		}
		return SSAOverride, key, fmt.Errorf("annotation %s: unknown value %q (one of %s, %s, %s, %s)",
			key, v, SSAOverride, SSAMerge, SSAIfNotPresent, SSAIgnore)
	}
	return SSAOverride, "", nil
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
