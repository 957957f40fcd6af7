package v1alpha1

import (
	"encoding/json"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// ReconcileRequest returns the RequestedAtAnnotation value for a request made at now and the
// JSON merge patch that sets it on a Sync. Every client asking for a reconcile (the
// `converge reconcile` verb, the push webhook) writes the same patch, so the daemon reads one
// format. A non-empty uid is carried in the patch: the API server then refuses it when the
// Sync was deleted and recreated under the same name in between.
func ReconcileRequest(uid types.UID, now time.Time) (value string, patch []byte, err error) {
	value = now.UTC().Format(time.RFC3339Nano)
	meta := map[string]any{"annotations": map[string]string{RequestedAtAnnotation: value}}
	if uid != "" {
		meta["uid"] = uid
	}
	patch, err = json.Marshal(map[string]any{"metadata": meta})
	return value, patch, err
}
