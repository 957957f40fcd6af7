package pipeline

import (
	"maps"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/converge-dev/converge/sources"
)

// Metadata are labels and annotations set on every object of a prepared Bundle, after
// decryption and substitution, as Flux's Kustomization spec.commonMetadata: they win over
// the objects' own, and neither a variable nor a SOPS MAC ever sees them.
type Metadata struct {
	Labels      map[string]string
	Annotations map[string]string
}

// apply returns b with m set on every object. The objects of b are never modified (they
// may be shared with a kept result): each is copied down to its metadata, the rest shared.
func (m *Metadata) apply(b *sources.Bundle) *sources.Bundle {
	if m == nil || len(m.Labels) == 0 && len(m.Annotations) == 0 {
		return b
	}
	out := *b
	out.Key = "" // its objects are not the render's: nothing after this step keeps a memo
	out.Objects = make([]*unstructured.Unstructured, len(b.Objects))
	for i, o := range b.Objects {
		obj := maps.Clone(o.Object)
		md, _ := obj["metadata"].(map[string]any)
		md = maps.Clone(md)
		if md == nil {
			md = map[string]any{}
		}
		obj["metadata"] = md
		setAll(md, "labels", m.Labels)
		setAll(md, "annotations", m.Annotations)
		out.Objects[i] = &unstructured.Unstructured{Object: obj}
	}
	return &out
}

// setAll sets values in md[key], a copy of it.
func setAll(md map[string]any, key string, values map[string]string) {
	if len(values) == 0 {
		return
	}
	have, _ := md[key].(map[string]any)
	m := make(map[string]any, len(have)+len(values))
	maps.Copy(m, have)
	for k, v := range values {
		m[k] = v
	}
	md[key] = m
}
