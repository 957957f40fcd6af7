package v1alpha1

// Rollback pins a Sync to an earlier revision of its source.
type Rollback struct {
	// Revision is the revision to apply, as status.lastAppliedRevision names it: a git
	// source's "<branch>@sha1:<commit>" (or "sha1:<commit>"), an OCI source's
	// "<tag>@sha256:<digest>" (or "sha256:<digest>").
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +required
	Revision string `json:"revision"`
	// Until says what lifts the pin: Resume (the default: spec.rollback is removed, as
	// `converge resume` does) or NewRevision (the source's head moves past From).
	// +kubebuilder:validation:Enum=Resume;NewRevision
	// +optional
	Until string `json:"until,omitempty"`
	// From is the source's revision when the pin was set; with Until NewRevision the pin
	// holds while the source is still at it.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	From string `json:"from,omitempty"`
}

// The values of Rollback.Until.
const (
	RollbackUntilResume      = "Resume"
	RollbackUntilNewRevision = "NewRevision"
)

// RolledBack says the Sync applies an earlier revision than its source's head.
type RolledBack struct {
	// From is the source's revision the Sync does not apply.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	From string `json:"from,omitempty"`
	// To is the revision applied instead.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	To string `json:"to,omitempty"`
	// Automatic is true for a rollback the daemon chose (spec.autoRollback), false for
	// spec.rollback.
	// +optional
	Automatic bool `json:"automatic,omitempty"`
	// Reason is why: the failure of From for an automatic rollback.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Reason string `json:"reason,omitempty"`
}
