package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// MaxHistory is how many outcomes status.history keeps: the oldest is dropped first.
const MaxHistory = 10

// MaxHistoryMessage bounds the message of one history entry, in bytes.
const MaxHistoryMessage = 256

// HistoryEntry is one distinct outcome of a Sync: a generation, a revision and the Ready
// status and reason it ended with. The same outcome again is counted on its entry (Count,
// LastSeen), but only when the status is written anyway: a reconcile that changes nothing
// else writes nothing, so Count and LastSeen are a lower bound and the time of the last
// recorded write, not of every reconcile.
type HistoryEntry struct {
	// Revision is the revision the outcome is about; empty when the source could not be
	// fetched.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Revision string `json:"revision,omitempty"`
	// Digest is the content digest the revision names ("sha1:<hex>", "sha256:<hex>"), when
	// it names one.
	// +kubebuilder:validation:MaxLength=160
	// +optional
	Digest string `json:"digest,omitempty"`
	// Generation is the metadata.generation the outcome describes.
	// +optional
	Generation int64 `json:"generation,omitempty"`
	// Ready is the status of the Ready condition the outcome set: True or False.
	// +optional
	Ready metav1.ConditionStatus `json:"ready,omitempty"`
	// Reason is the Ready condition's reason (Succeeded, HealthCheckFailed, …).
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message is the start of the Ready condition's message, at most 256 bytes.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Message string `json:"message,omitempty"`
	// Summary counts what the Sync's last change did when the outcome was first recorded
	// (status.summary).
	// +optional
	Summary *Summary `json:"summary,omitempty"`
	// Duration is how long the reconcile that first reached this outcome took, when known.
	// +optional
	Duration *metav1.Duration `json:"duration,omitempty"`
	// FirstSeen is when the outcome was first recorded.
	// +optional
	FirstSeen metav1.Time `json:"firstSeen,omitempty"`
	// LastSeen is when the outcome was last recorded (a write of the status for another
	// reason): a reconcile that writes nothing does not move it.
	// +optional
	LastSeen metav1.Time `json:"lastSeen,omitempty"`
	// Count is how many recorded writes found this outcome, at least 1.
	// +optional
	Count int32 `json:"count,omitempty"`
}
