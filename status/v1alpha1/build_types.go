package v1alpha1

// BuildFields are Flux Kustomization's inline build fields: they change the render of a
// git or OCI source's path as kustomize-controller does, by extending the kustomization at
// the path (or one generated there, listing the folder's manifests) before it is built.
// A Helm chart has spec.source.helm.postRenderers instead.
type BuildFields struct {
	// Patches are strategic merge or JSON6902 patches, applied in order to the objects
	// their target selects (a target matching nothing is no error), as Flux's
	// spec.patches.
	// +kubebuilder:validation:MaxItems=256
	// +optional
	Patches []KustomizePatch `json:"patches,omitempty"`
	// Images override container images, as Flux's spec.images: an entry with the name of
	// one of the kustomization's own images changes the fields it sets and keeps the rest.
	// +kubebuilder:validation:MaxItems=256
	// +optional
	Images []KustomizeImage `json:"images,omitempty"`
	// NamePrefix is prefixed to the name of every object, as Flux's spec.namePrefix (it
	// replaces the kustomization's own).
	// +kubebuilder:validation:MaxLength=200
	// +optional
	NamePrefix string `json:"namePrefix,omitempty"`
	// NameSuffix is appended to the name of every object, as Flux's spec.nameSuffix (it
	// replaces the kustomization's own).
	// +kubebuilder:validation:MaxLength=200
	// +optional
	NameSuffix string `json:"nameSuffix,omitempty"`
	// CommonMetadata labels and annotations are set on every object after the render is
	// decrypted and its variables substituted, as Flux's spec.commonMetadata (they win
	// over the source's own).
	// +optional
	CommonMetadata *CommonMetadata `json:"commonMetadata,omitempty"`
	// Components are kustomize Components added to the kustomization, as paths relative
	// to spec.path that stay inside the source, as Flux's spec.components.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=1024
	// +optional
	Components []string `json:"components,omitempty"`
	// IgnoreMissingComponents leaves out the Components that do not exist in the source
	// instead of failing, as Flux's spec.ignoreMissingComponents.
	// +optional
	IgnoreMissingComponents bool `json:"ignoreMissingComponents,omitempty"`
}

// CommonMetadata are labels and annotations set on every object of a render.
type CommonMetadata struct {
	// Labels are set on every object.
	// +kubebuilder:validation:MaxProperties=64
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// Annotations are set on every object.
	// +kubebuilder:validation:MaxProperties=64
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// HasBuildFields reports whether any of the fields is set.
func (b *BuildFields) HasBuildFields() bool {
	return len(b.Patches) > 0 || len(b.Images) > 0 || b.NamePrefix != "" || b.NameSuffix != "" ||
		b.CommonMetadata != nil || len(b.Components) > 0
}
