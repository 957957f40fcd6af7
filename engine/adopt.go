package engine

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/object"

	"github.com/converge-dev/converge/inventory"
)

// Who may take over a live object, and who may delete it to recreate it (I1, I11).
//
//   - Whether an owner annotation makes an object ours is decided by one rule,
//     inventory.Claim.Owns: it is our inventory ID. Apply, prune, Delete and Abandon all ask
//     it (through owns, which also honours a legacy-ID migration under way: legacy.go).
//   - An object whose owner annotation names another inventory is never taken over
//     (ErrNotOwned).
//   - An object carrying our legacy ID is decided in legacy.go (owns, then
//     mayTakeOverLegacy): ours during its migration when the legacy ConfigMap recorded its
//     UID and the other inventory of the legacy ID does not list it; otherwise taken over
//     only with ApplyOptions.Adopt (else ErrNotAdopted, saying how to adopt it or let it
//     go), and never when that other inventory lists it (inventory.ContestedError) or
//     cannot be named.
//   - An object without an owner annotation that the stored inventory recorded (same UID) is
//     ours: someone removed the annotation, and the apply puts it back.
//   - Any other object without an owner annotation is adopted only when nobody else deploys it:
//     its managedFields name no manager but Converge's (and Kubernetes' own components) and it
//     has no kubectl last-applied-configuration. Objects another tool manages (Helm, kubectl
//     apply, another GitOps engine) fail with ErrNotAdopted, naming the manager, unless
//     ApplyOptions.Adopt. Objects only Converge's field manager wrote — an install from before
//     the owner annotation, a Namespace `converge install` created — are adopted as before.
//   - A forced recreate (ApplyOptions.Force, the force annotation) deletes only an object our
//     inventory owns: its owner annotation is ours (owns), it is in the stored inventory, and its
//     UID is the one recorded there (when one is recorded).

// lastAppliedAnnotation is kubectl's client-side apply record.
const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// foreignManager returns a name for the tool, other than Converge, that manages live (an
// object without our owner annotation): the first other field manager of its main resource,
// or kubectl when it carries kubectl's last-applied-configuration; "" when there is none.
// Kubernetes' own components (kube-controller-manager writes a Deployment's revision
// annotation, for one) do not count: they manage objects whoever deployed them.
func foreignManager(live *unstructured.Unstructured, manager string) string {
	for _, mf := range live.GetManagedFields() {
		if mf.Subresource != "" || ownManager(mf.Manager, manager) || systemManager(mf.Manager) {
			continue
		}
		return fmt.Sprintf("field manager %q (%s)", mf.Manager, strings.ToLower(string(mf.Operation)))
	}
	if _, ok := live.GetAnnotations()[lastAppliedAnnotation]; ok {
		return "kubectl apply (" + lastAppliedAnnotation + ")"
	}
	return ""
}

// ownManager reports whether name is a field manager of Converge: the run's, the default
// one, or one of the converge-… managers of its own commands.
func ownManager(name, manager string) bool {
	return name == manager || name == FieldManager || strings.HasPrefix(name, FieldManager+"-")
}

// systemManager reports whether name is a Kubernetes component's field manager.
func systemManager(name string) bool {
	return strings.HasPrefix(name, "kube-") || name == "kubelet"
}

// notOursToRecreate returns why live may not be deleted for a forced recreate, or "" when
// our inventory owns it (see above).
func (r *applyRun) notOursToRecreate(id object.ObjMetadata, live *unstructured.Unstructured) string {
	owner := live.GetAnnotations()[OwnerAnnotation]
	switch {
	case owner == "":
		return fmt.Sprintf("%s carries no %s annotation yet (it is not ours until an apply without the immutable change adopts it; or delete it yourself)",
			Describe(id), OwnerAnnotation)
	case !owns(r.claim, id, owner, live.GetUID(), r.old.UID(id)):
		return fmt.Sprintf("%s is owned by %s", Describe(id), inventory.Describe(owner))
	case !r.old.Has(id):
		return fmt.Sprintf("%s is not in this inventory", Describe(id))
	case r.old.UID(id) != "" && r.old.UID(id) != live.GetUID():
		return fmt.Sprintf("%s has UID %s, not the %s this inventory recorded: someone else recreated it",
			Describe(id), live.GetUID(), r.old.UID(id))
	}
	return ""
}
