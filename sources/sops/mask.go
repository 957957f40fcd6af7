package sops

import (
	"encoding/base64"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/sources/sops/internal/wire"
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
		if entries := wire.EncryptedEntries(o); len(entries) > 0 {
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
	eachCiphertext(orig, fin, func(_ any, set func(any), data bool) {
		if secret && data {
			set(maskedData)
		} else {
			set(Mask)
		}
	})
}

// eachCiphertext calls fn for each value of fin at a path where orig holds a SOPS
// ciphertext, with a setter for that place in fin; data tells a value directly under the
// top-level "data" map. The "sops" metadata is skipped.
func eachCiphertext(orig, fin map[string]any, fn func(v any, set func(any), data bool)) {
	walkMap(orig, fin, true, false, fn)
}

func walkMap(orig, fin map[string]any, top, data bool, fn func(any, func(any), bool)) {
	for k, ov := range orig {
		fv, ok := fin[k]
		if k == "sops" || !ok {
			continue
		}
		walkValue(ov, fv, func(v any) { fin[k] = v }, top && k == "data", data, fn)
	}
}

func walkValue(ov, fv any, set func(any), dataMap, data bool, fn func(any, func(any), bool)) {
	switch o := ov.(type) {
	case string:
		if wire.IsCiphertext(o) {
			fn(fv, set, data)
		}
	case map[string]any:
		if f, ok := fv.(map[string]any); ok {
			walkMap(o, f, false, dataMap, fn)
		}
	case []any:
		if f, ok := fv.([]any); ok && len(f) == len(o) {
			for i := range o {
				walkValue(o[i], f[i], func(v any) { f[i] = v }, false, false, fn)
			}
		}
	}
}

// Plaintexts returns the string values decrypted wherever rendered held a ciphertext (the
// same objects in the same order as decrypted), so a caller can keep them out of text it
// prints that was not built from Secrets alone (a diff of a decrypted ConfigMap, an API
// server's error quoting a value). Values shorter than 4 bytes are left out: replacing
// them everywhere would mangle the text more than it protects.
func Plaintexts(decrypted, rendered *sources.Bundle) []string {
	var out []string
	add := func(v any) {
		if s, ok := v.(string); ok && len(s) >= 4 {
			out = append(out, s)
		}
	}
	for i, o := range rendered.Objects {
		if i >= len(decrypted.Objects) || !Encrypted(o) || decrypted.Objects[i] == o {
			continue
		}
		d := decrypted.Objects[i].Object
		if entries := wire.EncryptedEntries(o); len(entries) > 0 {
			for _, k := range entries {
				v, _, _ := unstructured.NestedString(d, "data", k)
				if raw, err := base64.StdEncoding.DecodeString(v); err == nil {
					add(string(raw))
				}
				add(v)
			}
			continue
		}
		secret := o.GetKind() == "Secret" && o.GroupVersionKind().Group == ""
		collectLike(o.Object, d, secret, add)
	}
	return out
}

// collectLike calls add with each value of fin at a path where orig holds a ciphertext
// (and, for a Secret, with the decoded value too).
func collectLike(orig, fin map[string]any, secret bool, add func(any)) {
	eachCiphertext(orig, fin, func(v any, _ func(any), _ bool) {
		add(v)
		if s, ok := v.(string); ok && secret {
			if raw, err := base64.StdEncoding.DecodeString(s); err == nil {
				add(string(raw))
			}
		}
	})
}
