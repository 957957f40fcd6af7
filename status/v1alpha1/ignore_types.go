package v1alpha1

// IgnoreRule names fields to leave alone, as Flux's Kustomization spec.ignore and Argo CD's
// ignoreDifferences: the daemon never sets them against the live object, never shows them
// as a change, and a change another manager makes to them triggers no apply. An ignored
// field that another field manager owns in the live object, and Converge does not, is left
// out of the apply altogether, so that manager keeps it alone.
// +kubebuilder:validation:XValidation:rule="has(self.paths) || has(self.managers)",message="an ignore rule names paths, managers or both"
type IgnoreRule struct {
	// Paths are JSON pointers (RFC 6901) of the fields, such as /spec/replicas or
	// /metadata/annotations/example.com~1checksum.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=2
	// +kubebuilder:validation:items:MaxLength=1024
	// +kubebuilder:validation:items:Pattern=`^/`
	// +optional
	Paths []string `json:"paths,omitempty"`
	// Managers are field managers whose fields are left alone, as Argo CD's
	// managedFieldsManagers: every field of a rendered object that one of them owns in the
	// live object's managedFields (any operation, any subresource: kube-controller-manager's
	// scale entry owning spec.replicas for an HPA, a mutating webhook's injections). A name,
	// or a prefix ending in "*". Converge's own manager (converge, converge-*) cannot be
	// named, nor can the owner annotation, an object's identity or the shard label be left
	// alone.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.all(m, m != 'converge' && !m.startsWith('converge-') && !('converge-'.startsWith(m.replace('*', '')) && m.endsWith('*')))",message="Converge's own field manager (converge, converge-*) is what the Sync applies: it cannot be ignored"
	// +optional
	Managers []string `json:"managers,omitempty"`
	// Target selects the objects the rule applies to (regular expressions for group,
	// version, kind, name and namespace, label and annotation selectors); unset: every object.
	// +optional
	Target *PatchSelector `json:"target,omitempty"`
}
