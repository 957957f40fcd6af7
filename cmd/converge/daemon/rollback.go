package daemon

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/cli-utils/pkg/object"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/sources/git"
	"github.com/converge-dev/converge/sources/oci"
	"github.com/converge-dev/converge/status"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// Reasons of a Sync that applies an earlier revision than its source's head.
const (
	// reasonRolledBack: Ready at the revision a rollback applies.
	reasonRolledBack = "RolledBack"
	// reasonRollbackRefused: the rollback would delete a CRD or prune more than
	// spec.pruneBudget allows, or names a revision the source cannot be pinned to.
	reasonRollbackRefused = "RollbackRefused"
)

// pin is the rollback s is under while its source's head is at head: spec.rollback until
// lifted (by its removal, or with until NewRevision by a head other than its from), else an
// automatic rollback away from head. Nil: head is applied.
func pin(s *v1alpha1.Sync, head string) *v1alpha1.RolledBack {
	if rb := s.Spec.Rollback; rb != nil {
		if rb.Until == v1alpha1.RollbackUntilNewRevision && rb.From != "" && rb.From != head {
			return nil
		}
		return &v1alpha1.RolledBack{From: head, To: rb.Revision, Reason: "spec.rollback"}
	}
	if rb := s.Status.RolledBack; s.Spec.AutoRollback && rb != nil && rb.Automatic && rb.From == head && rb.To != "" &&
		readyAtGeneration(s, rb.To) {
		p := *rb
		return &p
	}
	return nil
}

// readyAtGeneration says s's history records revision Ready at s's current generation: an
// automatic rollback goes back only to what was Ready with the spec as it is now, and a spec
// change lifts it.
func readyAtGeneration(s *v1alpha1.Sync, revision string) bool {
	for _, h := range s.Status.History {
		if h.Revision == revision && h.Ready == metav1.ConditionTrue && h.Generation == s.Generation {
			return true
		}
	}
	return false
}

// withAutoRollback is o, with the automatic rollback it starts (autoRollback) recorded.
func withAutoRollback(s *v1alpha1.Sync, o status.Outcome) status.Outcome {
	if rb := autoRollback(s, o); rb != nil {
		o.RolledBack = rb
		o.Message += "; rolling back to " + rb.To + " (spec.autoRollback)"
	}
	return o
}

// autoRollback is the automatic rollback o starts: s has spec.autoRollback, o is the
// failure of its source's head to become healthy within spec.timeout, and s was Ready at an
// earlier revision, which no rollback from this head tried yet. Nil otherwise.
func autoRollback(s *v1alpha1.Sync, o status.Outcome) *v1alpha1.RolledBack {
	last := s.Status.LastAppliedRevision
	switch {
	case !s.Spec.AutoRollback, !o.WaitOver, o.Reason != reasonHealthCheck, o.RolledBack != nil,
		last == "", last == o.AttemptedRevision, !readyAtGeneration(s, last):
		return nil
	case s.Status.RolledBack != nil && s.Status.RolledBack.From == o.AttemptedRevision:
		return nil // tried (or refused) already: a new revision lifts it
	}
	return &v1alpha1.RolledBack{From: o.AttemptedRevision, To: last, Automatic: true, Reason: truncate(o.Message, 512)}
}

// revisionForm splits a revision as status.lastAppliedRevision names it: "<name>@<algo>:<hex>"
// or "<algo>:<hex>".
var revisionForm = regexp.MustCompile(`^(?:([^@]+)@)?(sha1|sha256):([0-9a-f]{40}|[0-9a-f]{64})$`)

// pinned is src fetching revision instead of its head: a git commit (keeping the branch that
// names it), or an OCI digest.
func pinned(src sources.Source, revision string) (sources.Source, error) {
	m := revisionForm.FindStringSubmatch(revision)
	switch {
	case m == nil:
		return src, fmt.Errorf("spec.rollback: revision %q is not of the form <branch>@sha1:<commit> or <tag>@sha256:<digest>", revision)
	case src.Git.URL != "" && src.Git.Verify != nil && src.Git.Verify.Mode != "" && src.Git.Verify.Mode != git.VerifyHEAD:
		return src, fmt.Errorf("spec.rollback: a source verified by its tag's signature (verify mode %s) cannot be pinned to a commit; pin spec.source.git.ref.tag to the earlier tag instead", src.Git.Verify.Mode)
	case src.Git.URL != "" && m[2] == "sha1" && len(m[3]) == 40:
		branch := m[1]
		if branch == "" {
			branch = src.Git.Ref.Branch
		}
		src.Git.Ref.Branch, src.Git.Ref.Tag, src.Git.Ref.SemVer, src.Git.Ref.Commit = branch, "", "", m[3]
		return src, nil
	case src.OCI.URL != "" && m[2] == "sha256" && len(m[3]) == 64:
		src.OCI.Ref = oci.Ref{Digest: "sha256:" + m[3]}
		return src, nil
	case src.Git.URL == "" && src.OCI.URL == "":
		return src, errors.New("spec.rollback: only git and OCI sources are rolled back by revision; pin a chart's version in spec.source instead")
	}
	return src, fmt.Errorf("spec.rollback: revision %q does not name a %s of this source", revision, map[bool]string{true: "git commit", false: "OCI digest"}[src.Git.URL != ""])
}

// rollbackDropsCRDs is crdsDropped on the recovery copy in s's status. The cache keeps a
// digest of the copy, so the check reads the Sync from the API server (recoveryCopy); what it
// passed on (the copy's size and digest, the CRDs objects declare) is remembered, and a
// reconcile that finds the same in a cache that shows our last status write passes without
// the read: a Sync that stays rolled back reads nothing per reconcile. A refusal is never
// remembered, and a reconcile that applies the head forgets the pass.
func (r *reconciler) rollbackDropsCRDs(ctx context.Context, s *v1alpha1.Sync, objects []*unstructured.Unstructured) ([]string, error) {
	key := client.ObjectKeyFromObject(s)
	declared := declaredCRDs(objects)
	names := strings.Join(slices.Sorted(maps.Keys(declared)), "\x00")
	checked := func(inv *v1alpha1.InventoryStatus, digest string) string {
		return fmt.Sprintf("%d\x00%s\x00%s", inv.Entries, digest, names)
	}
	// Only a cache that shows our last status write: one behind it (a watch outage) may show
	// a copy the check passed on before the head applied new CRDs.
	if status.Compacted(s) && !r.writer.Behind(key, s) {
		cached, passed := checked(s.Status.Inventory, s.Status.Inventory.Digest), false
		r.states.read(key, func(st *syncState) { passed = st.uid == s.UID && st.rollbackChecked == cached })
		if passed {
			return nil, nil
		}
	}
	recorded, err := r.recoveryCopy(ctx, s)
	if err != nil {
		return nil, err
	}
	dropped := crdsDropped(recorded, declared)
	if len(dropped) == 0 && recorded != nil {
		passed := checked(recorded, status.InventoryDigest(recorded.Objects))
		r.states.with(key, func(st *syncState) {
			if st.uid == s.UID {
				st.rollbackChecked = passed
			}
		})
	}
	return dropped, nil
}

// declaredCRDs is the set of the names of the CRDs among objects.
func declaredCRDs(objects []*unstructured.Unstructured) map[string]bool {
	declared := map[string]bool{}
	for _, u := range objects {
		if u.GetKind() == "CustomResourceDefinition" && u.GroupVersionKind().Group == "apiextensions.k8s.io" {
			declared[u.GetName()] = true
		}
	}
	return declared
}

// crdsDropped names the CRDs the inventory record inv (a Sync's status.inventory with its
// recovery copy) lists that are not declared (by the revision a rollback applies, the names
// declaredCRDs returns): pruning one deletes every custom resource of its kinds.
func crdsDropped(inv *v1alpha1.InventoryStatus, declared map[string]bool) []string {
	if inv == nil || inv.Entries > len(inv.Objects) {
		// Which CRDs the Sync applies is not known from its status: refused, as one may be.
		return []string{"(status.inventory does not list every object the Sync applies)"}
	}
	var dropped []string
	for _, e := range inv.Objects {
		id, err := object.ParseObjMetadata(e.ID)
		if err == nil && id.GroupKind.Kind == "CustomResourceDefinition" && id.GroupKind.Group == "apiextensions.k8s.io" && !declared[id.Name] {
			dropped = append(dropped, id.Name)
		}
	}
	slices.Sort(dropped)
	return dropped
}

// rollBack fetches and renders the revision p rolls s back to instead of its source's head,
// and records it in o: the revision attempted, and status.rolledBack. It refuses a revision
// whose objects lack a CRD the Sync applies.
func (r *reconciler) rollBack(ctx context.Context, s *v1alpha1.Sync, o *status.Outcome, src sources.Source,
	p *v1alpha1.RolledBack) (*sources.Bundle, *failure) {
	// A failure below keeps the pin and the revision attempted: the head is not applied
	// meanwhile, and the pinned revision's readiness deadline runs on.
	o.RolledBack, o.AttemptedRevision = p, p.To
	psrc, err := pinned(src, p.To)
	if err != nil {
		return nil, terminal(reasonRollbackRefused, err)
	}
	bundle, err := r.render.load(ctx, r.loader, psrc, pinnedOwner(client.ObjectKeyFromObject(s)), nil)
	if bundle == nil {
		return nil, ofSource(fetchFailReason(err), fmt.Errorf("rolling back to %s: %w", p.To, err))
	}
	if err != nil && !(errors.Is(err, sources.ErrEmptyRender) && s.Spec.AllowEmpty) {
		return nil, ofSource(reasonBuildFailed, fmt.Errorf("rolling back to %s: %w", p.To, err))
	}
	if bundle, err = bundle.Decoded(); err != nil {
		return nil, ofSource(reasonBuildFailed, fmt.Errorf("rolling back to %s: %w", p.To, err))
	}
	if dropped, err := r.rollbackDropsCRDs(ctx, s, bundle.Objects); err != nil {
		return nil, retryable(reasonApplyFailed, fmt.Errorf("rolling back to %s: reading the inventory recorded in status: %w", p.To, err))
	} else if len(dropped) > 0 {
		refused := *p
		refused.To, refused.Reason = "", "refused: "+p.To+" lacks CRD "+strings.Join(dropped, ", ")
		o.RolledBack, o.AttemptedRevision = &refused, p.From
		return nil, terminal(reasonRollbackRefused, fmt.Errorf("not rolled back from %s to %s: it does not declare CRD %s, which the Sync applies, and pruning a CRD deletes its custom resources",
			p.From, p.To, strings.Join(dropped, ", ")))
	}
	p.To, o.AttemptedRevision = bundle.Revision, bundle.Revision
	return bundle, nil
}

// refuseRollbackOverBudget is the refusal of the rollback o applies at revision when the
// engine refused its prune (engine.ErrPruneRefused: more objects than spec.pruneBudget, or
// all of them for an empty render): nothing was applied or pruned, and the rollback is
// refused as one that would drop a CRD is, an automatic one not tried again for its head.
// Nil when err is another error or o applies the source's head.
func refuseRollbackOverBudget(o *status.Outcome, revision string, err error) *failure {
	p := o.RolledBack
	if p == nil || p.To == "" || p.To != revision || !errors.Is(err, engine.ErrPruneRefused) {
		return nil
	}
	refused := *p
	refused.To, refused.Reason = "", "refused: "+p.To+" would prune more than spec.pruneBudget allows"
	o.RolledBack, o.AttemptedRevision = &refused, p.From
	return terminal(reasonRollbackRefused, fmt.Errorf("not rolled back from %s to %s (spec.pruneBudget): %w", p.From, p.To, err))
}

// rolledBackFrom is the revision a Sync does not apply because it is rolled back, after o
// (read from s's status when o did not learn it); empty when it applies its head.
func rolledBackFrom(s *v1alpha1.Sync, o status.Outcome) string {
	rb, attempted := s.Status.RolledBack, s.Status.LastAttemptedRevision
	if o.RollbackKnown {
		rb, attempted = o.RolledBack, o.AttemptedRevision
	}
	if rb == nil || rb.To == "" || rb.To != attempted {
		return "" // none, refused, or decided and not applied yet
	}
	return rb.From
}

// rollbackApplied says o is the first outcome that applies the revision a rollback goes back
// to, where s's status attempted another: the moment to tell (an event), once.
func rollbackApplied(s *v1alpha1.Sync, o status.Outcome) bool {
	return rolledBackFrom(s, o) != "" && s.Status.LastAttemptedRevision != o.AttemptedRevision
}

// rollbackStarted says o rolls s back where its status did not: a new rollback, or one to
// another revision.
func rollbackStarted(s *v1alpha1.Sync, o status.Outcome) bool {
	if !o.RollbackKnown || o.RolledBack == nil || o.RolledBack.To == "" {
		return false
	}
	old := s.Status.RolledBack
	return old == nil || old.From != o.RolledBack.From || old.To != o.RolledBack.To
}

// pinnedOwner is the render-cache owner of the revision a Sync is rolled back to, apart from
// its head's (key): while pinned, each reconcile loads both, and under one owner each load
// would evict the other's render and render it again. A Sync's name holds no "/".
func pinnedOwner(key types.NamespacedName) types.NamespacedName {
	return types.NamespacedName{Namespace: key.Namespace, Name: key.Name + "/rollback"}
}
