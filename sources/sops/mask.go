package sops

import (
	"encoding/base64"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/converge-dev/converge/sources"
)

// Mask replaces an encrypted value in a printed render: Flux's "flux build kustomization"
// prints the same (base64-encoded in a Secret's data).
const Mask = "**SOPS**"

// MaskValues returns final with every value that is encrypted in original replaced by Mask,
// and the "sops" metadata dropped, for printing a render without its secrets. final is what
// original became (decrypted, possibly transformed further) and has the same objects in the
// same order; original is the render before Decrypt, or final itself when nothing was
// decrypted. Neither is modified: masked objects are deep copies.
func MaskValues(final, original *sources.Bundle) *sources.Bundle {
	var out *sources.Bundle
	for i, o := range original.Objects {
		if i >= len(final.Objects) || !Encrypted(o) {
			continue
		}
		m := final.Objects[i].DeepCopy()
		unstructured.RemoveNestedField(m.Object, "sops")
		if entries := encryptedEntries(o); len(entries) > 0 {
			for _, k := range entries {
				_ = unstructured.SetNestedField(m.Object, maskedData, "data", k)
			}
		} else {
			maskLike(o.Object, m.Object, m.GetKind() == "Secret" && m.GroupVersionKind().Group == "")
		}
		if out == nil {
			c := *final
			c.Objects = append([]*unstructured.Unstructured(nil), final.Objects...)
			out = &c
		}
		out.Objects[i] = m
	}
	if out == nil {
		return final
	}
	return out
}

var maskedData = base64.StdEncoding.EncodeToString([]byte(Mask))

// maskLike replaces, in fin, each value at a path where orig holds a SOPS ciphertext. A
// Secret's data values get the base64 of Mask, so the printed Secret stays valid.
func maskLike(orig, fin map[string]any, secret bool) {
	for k, ov := range orig {
		if k == "sops" {
			continue
		}
		fv, ok := fin[k]
		if !ok {
			continue
		}
		if secret && k == "data" {
			od, _ := ov.(map[string]any)
			fd, _ := fv.(map[string]any)
			for dk, dv := range od {
				if _, ok := fd[dk]; ok && isCiphertext(dv) {
					fd[dk] = maskedData
				}
			}
			continue
		}
		fin[k] = maskValue(ov, fv)
	}
}

func maskValue(ov, fv any) any {
	switch o := ov.(type) {
	case string:
		if isCiphertext(o) {
			return Mask
		}
	case map[string]any:
		if f, ok := fv.(map[string]any); ok {
			maskLike(o, f, false)
		}
	case []any:
		if f, ok := fv.([]any); ok && len(f) == len(o) {
			for i := range o {
				f[i] = maskValue(o[i], f[i])
			}
		}
	}
	return fv
}

func isCiphertext(v any) bool {
	s, ok := v.(string)
	return ok && strings.HasPrefix(s, "ENC[")
}
