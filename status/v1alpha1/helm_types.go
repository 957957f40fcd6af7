package v1alpha1

// ValuesReference names a ConfigMap or Secret key holding Helm values, as an entry of
// Flux's HelmRelease valuesFrom.
type ValuesReference struct {
	// Kind is ConfigMap or Secret.
	// +kubebuilder:validation:Enum=ConfigMap;Secret
	// +required
	Kind string `json:"kind"`
	// Name of the ConfigMap or Secret, in the Sync's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
	// ValuesKey is the key holding the values; empty means values.yaml.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[\-._a-zA-Z0-9]*$`
	// +optional
	ValuesKey string `json:"valuesKey,omitempty"`
	// TargetPath sets the key's content as one value at this path (Helm --set syntax,
	// such as a.b[0].c), instead of merging it as a YAML document: true, false, null and
	// integers are typed as --set types them, a quoted value is the string inside the quotes.
	// A list index is at most 999.
	// +kubebuilder:validation:MaxLength=250
	// +kubebuilder:validation:Pattern=`^([a-zA-Z0-9_\-.\\\/]|\[[0-9]{1,3}\])*$`
	// +optional
	TargetPath string `json:"targetPath,omitempty"`
	// Optional lets the render go on without the values when the object or the key does
	// not exist; a missing required one fails the reconcile, nothing applied or pruned.
	// +optional
	Optional bool `json:"optional,omitempty"`
}

// PostRenderer changes a chart's rendered objects; kustomize is the only kind.
type PostRenderer struct {
	// Kustomize patches the chart's objects and overrides their images.
	// +optional
	Kustomize *KustomizePostRenderer `json:"kustomize,omitempty"`
}

// KustomizePostRenderer does to a chart's objects what a kustomization listing them as its
// resources, with these patches and images, does.
type KustomizePostRenderer struct {
	// Patches are strategic merge or JSON6902 patches, applied in order.
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Patches []KustomizePatch `json:"patches,omitempty"`
	// Images override container images, as a kustomization's images.
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Images []KustomizeImage `json:"images,omitempty"`
}

// KustomizePatch is a strategic merge patch or a JSON6902 patch, applied to the objects
// Target selects or, for a strategic merge patch without Target, to the object it names.
type KustomizePatch struct {
	// Patch is the patch, as YAML or JSON.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=65536
	// +required
	Patch string `json:"patch"`
	// Target selects the objects patched.
	// +optional
	Target *PatchSelector `json:"target,omitempty"`
}

// PatchSelector selects objects by group, version, kind, name and namespace (regular
// expressions) and by label and annotation selectors, as a kustomize patch target.
type PatchSelector struct {
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Group string `json:"group,omitempty"`
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Version string `json:"version,omitempty"`
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Kind string `json:"kind,omitempty"`
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Name string `json:"name,omitempty"`
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// LabelSelector is a label selector expression, such as app=web,tier!=db.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	LabelSelector string `json:"labelSelector,omitempty"`
	// AnnotationSelector is a selector expression over annotations.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	AnnotationSelector string `json:"annotationSelector,omitempty"`
}

// KustomizeImage overrides the images named Name, as an entry of a kustomization's images.
type KustomizeImage struct {
	// Name is the image name as the objects give it, without tag or digest.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +required
	Name string `json:"name"`
	// NewName replaces the image's name.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	NewName string `json:"newName,omitempty"`
	// NewTag replaces the image's tag.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	NewTag string `json:"newTag,omitempty"`
	// Digest replaces the image's tag with a digest (sha256:...); it wins over NewTag.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Digest string `json:"digest,omitempty"`
}
