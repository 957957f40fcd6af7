package main

import (
	"fmt"
	"slices"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// fluxInlineFields are the Kustomization's inline build fields a Sync has under the same
// names (v1alpha1.BuildFields), and its ignore rules.
var fluxInlineFields = []string{"patches", "images", "namePrefix", "nameSuffix", "components",
	"ignoreMissingComponents", "commonMetadata", "ignore"}

// translateFluxInline reads the Kustomization's inline build fields, each into the Sync
// field of the same name; a key inside them that the Sync's has not is not translated.
func translateFluxInline(r *specReader, s *v1alpha1.Sync, spec map[string]any) {
	translateFluxIgnore(r, s, spec)
	b := &s.Spec.BuildFields
	b.NamePrefix = r.str(spec, "spec", "namePrefix")
	b.NameSuffix = r.str(spec, "spec", "nameSuffix")
	b.Components = r.strings(spec, "spec", "components")
	b.IgnoreMissingComponents = r.boolean(spec, "spec", "ignoreMissingComponents")
	for i, p := range r.objects(spec, "spec", "patches") {
		f := fmt.Sprintf("spec.patches[%d]", i)
		kp := v1alpha1.KustomizePatch{Patch: r.str(p, f, "patch")}
		kp.Target = r.selector(p, f)
		r.rest(p, f, reasonNoSyncKey, "patch", "target")
		b.Patches = append(b.Patches, kp)
	}
	for i, im := range r.objects(spec, "spec", "images") {
		f := fmt.Sprintf("spec.images[%d]", i)
		b.Images = append(b.Images, v1alpha1.KustomizeImage{Name: r.str(im, f, "name"), NewName: r.str(im, f, "newName"),
			NewTag: r.str(im, f, "newTag"), Digest: r.str(im, f, "digest")})
		r.rest(im, f, reasonNoSyncKey, "name", "newName", "newTag", "digest")
	}
	if cm := r.object(spec, "spec", "commonMetadata"); cm != nil {
		b.CommonMetadata = &v1alpha1.CommonMetadata{Labels: r.stringMap(cm, "spec.commonMetadata", "labels"),
			Annotations: r.stringMap(cm, "spec.commonMetadata", "annotations")}
		r.rest(cm, "spec.commonMetadata", reasonNoSyncKey, "labels", "annotations")
	}
}

// selector reads the target of a patch or an ignore rule at field (kustomize's selector);
// nil when there is none.
func (r *specReader) selector(m map[string]any, field string) *v1alpha1.PatchSelector {
	t := r.object(m, field, "target")
	if t == nil {
		return nil
	}
	tf := field + ".target"
	r.rest(t, tf, reasonNoSyncKey, "group", "version", "kind", "name", "namespace", "labelSelector", "annotationSelector")
	return &v1alpha1.PatchSelector{Group: r.str(t, tf, "group"), Version: r.str(t, tf, "version"),
		Kind: r.str(t, tf, "kind"), Name: r.str(t, tf, "name"), Namespace: r.str(t, tf, "namespace"),
		LabelSelector: r.str(t, tf, "labelSelector"), AnnotationSelector: r.str(t, tf, "annotationSelector")}
}

// strings reads a list of strings.
func (r *specReader) strings(m map[string]any, field, key string) []string {
	v, ok := m[key]
	if !ok || v == nil {
		return nil
	}
	l, ok := v.([]any)
	if !ok {
		r.malformed(field+"."+key, "a list", v)
		return nil
	}
	out := make([]string, 0, len(l))
	for i, e := range l {
		s, ok := e.(string)
		if !ok {
			r.malformed(fmt.Sprintf("%s.%s[%d]", field, key, i), "a string", e)
			continue
		}
		out = append(out, s)
	}
	return out
}

// stringMap reads a map of strings, such as labels.
func (r *specReader) stringMap(m map[string]any, field, key string) map[string]string {
	o := r.object(m, field, key)
	if len(o) == 0 {
		return nil
	}
	out := make(map[string]string, len(o))
	keys := make([]string, 0, len(o))
	for k := range o {
		keys = append(keys, k)
	}
	slices.Sort(keys) // malformed values reported in a stable order
	for _, k := range keys {
		out[k] = r.str(o, field+"."+key, k)
	}
	return out
}

// translateFluxIgnore reads the Kustomization's spec.ignore rules (Flux 1.9) into the
// Sync's, of the same shape.
func translateFluxIgnore(r *specReader, s *v1alpha1.Sync, spec map[string]any) {
	for i, rule := range r.objects(spec, "spec", "ignore") {
		f := fmt.Sprintf("spec.ignore[%d]", i)
		out := v1alpha1.IgnoreRule{Paths: r.strings(rule, f, "paths"), Target: r.selector(rule, f)}
		r.rest(rule, f, reasonNoSyncKey, "paths", "target")
		s.Spec.Ignore = append(s.Spec.Ignore, out)
	}
}
