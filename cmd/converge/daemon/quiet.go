package daemon

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"

	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/inventory"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// A reconcile whose render the cache holds, under the spec the last clean run applied, with
// no event about any of its objects since (engine.Engine.Quiet), neither decodes nor applies
// it: the engine answers with what the run would find, every object unchanged. At 10,000
// objects such a reconcile would decode 25 MB of objects and hash them all to send nothing.
// Only a Sync whose render is applied as it is takes this path: a substitution, a decryption
// or common metadata depend on more than the render, and a rollback on its own state.

// quietRun is one reconcile's question to the engine of its Sync, and the answer.
type quietRun struct {
	s   *v1alpha1.Sync
	eng *engine.Engine
	ref inventory.Ref
	res *engine.Result // the engine's answer, once Load asked (unneeded)
}

// quietFor returns the question of a reconcile of s, or nil when s's render is not applied
// as it is, or when s acts as a service account: the engines of those keep no inventory
// heads, so they never answer, and asking would build one before the render is known good.
func (r *reconciler) quietFor(s *v1alpha1.Sync) *quietRun {
	if s.Spec.PostBuild != nil || s.Spec.Decryption != nil || commonMetadata(s) != nil ||
		s.Spec.Rollback != nil || s.Status.RolledBack != nil || r.engines.user(s) != "" {
		return nil
	}
	eng, err := r.engines.forSync(s)
	if err != nil {
		return nil
	}
	return &quietRun{s: s, eng: eng, ref: InventoryRef(s)}
}

// unneeded is the Loader's question (sources.LoadOptions.Unneeded): the render renderKey
// need not be decoded when the engine answers for it. A nil quietRun never answers.
func (q *quietRun) unneeded() func(string) bool {
	if q == nil {
		return nil
	}
	return func(renderKey string) bool {
		q.res, _ = q.eng.Quiet(q.ref, q.key(renderKey))
		return q.res != nil
	}
}

// key is the engine.Set.Key of a run of the render renderKey for q's Sync: the render and
// what of the Sync makes the run's options (its UID, its generation, the request it
// handles). "" for a nil quietRun: its runs are never answered.
func (q *quietRun) key(renderKey string) string {
	if q == nil || renderKey == "" {
		return ""
	}
	h := sha256.New()
	for _, part := range []string{renderKey, string(q.s.UID), strconv.FormatInt(q.s.Generation, 10),
		q.s.Annotations[v1alpha1.RequestedAtAnnotation]} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}
