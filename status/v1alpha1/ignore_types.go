package v1alpha1

// IgnoreRule names fields to leave alone, as Flux's Kustomization spec.ignore: the daemon
// never sets them against the live object, never shows them as a change, and a change
// another manager makes to them triggers no apply.
type IgnoreRule struct {
	// Paths are JSON pointers (RFC 6901) of the fields, such as /spec/replicas or
	// /metadata/annotations/example.com~1checksum.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=2
	// +kubebuilder:validation:items:MaxLength=1024
	// +kubebuilder:validation:items:Pattern=`^/`
	// +required
	Paths []string `json:"paths"`
	// Target selects the objects the rule applies to (regular expressions for group,
	// version, kind, name and namespace, label and annotation selectors); unset: every object.
	// +optional
	Target *PatchSelector `json:"target,omitempty"`
}
