package daemon

import (
	"errors"

	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/sources/pipeline"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// overlay is the Sync's inline build fields (spec.patches, images, namePrefix, nameSuffix,
// components) as the render's overlay; nil when none is set.
func overlay(s *v1alpha1.Sync) *sources.Overlay {
	f := s.Spec.BuildFields
	if len(f.Patches) == 0 && len(f.Images) == 0 && f.NamePrefix == "" && f.NameSuffix == "" && len(f.Components) == 0 {
		return nil
	}
	o := &sources.Overlay{Setting: "spec", NamePrefix: f.NamePrefix, NameSuffix: f.NameSuffix,
		Components: f.Components, IgnoreMissingComponents: f.IgnoreMissingComponents}
	for _, p := range f.Patches {
		o.Patches = append(o.Patches, sourcePatch(p))
	}
	for _, im := range f.Images {
		o.Images = append(o.Images, sources.Image{Name: im.Name, NewName: im.NewName, NewTag: im.NewTag, Digest: im.Digest})
	}
	return o
}

// sourcePatch is p as the render reads it.
func sourcePatch(p v1alpha1.KustomizePatch) sources.Patch {
	sp := sources.Patch{Patch: p.Patch}
	if t := p.Target; t != nil {
		sp.Target = &sources.PatchTarget{Group: t.Group, Version: t.Version, Kind: t.Kind, Name: t.Name,
			Namespace: t.Namespace, LabelSelector: t.LabelSelector, AnnotationSelector: t.AnnotationSelector}
	}
	return sp
}

// commonMetadata is spec.commonMetadata as the pipeline sets it; nil when unset.
func commonMetadata(s *v1alpha1.Sync) *pipeline.Metadata {
	cm := s.Spec.CommonMetadata
	if cm == nil {
		return nil
	}
	return &pipeline.Metadata{Labels: cm.Labels, Annotations: cm.Annotations}
}

// errBuildFieldsOnChart refuses the inline build fields on a Helm chart, as the CRD's
// schema does (for a Sync stored before it did): they extend a kustomize build.
var errBuildFieldsOnChart = errors.New("spec: patches, images, namePrefix, nameSuffix, commonMetadata and components change a kustomize build: a Helm chart takes patches and images in spec.source.helm.postRenderers")

// checkBuildFields refuses the inline build fields where they do not apply.
func checkBuildFields(s *v1alpha1.Sync) error {
	if s.Spec.Source.Helm != nil && s.Spec.HasBuildFields() {
		return errBuildFieldsOnChart
	}
	return nil
}
