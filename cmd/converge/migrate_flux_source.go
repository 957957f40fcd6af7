package main

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// translateFluxSource reads a GitRepository or OCIRepository into s.Spec.Source, recording
// its untranslated and malformed fields on r under the source's own name.
func translateFluxSource(r *specReader, m *migration, s *v1alpha1.Sync, ks, src *unstructured.Unstructured) {
	sr := &specReader{name: describeObject(src)}
	spec := sr.object(src.Object, "", "spec")
	if spec == nil {
		sr.errs = append(sr.errs, "no spec")
	}
	// The source's polling interval: a Sync lists the source's refs on every reconcile, so
	// the shorter of the two intervals keeps both the fetch and the apply cadence.
	if d := sr.duration(spec, "spec", "interval", 2*time.Second, 8760*time.Hour); d != nil {
		s.Spec.Interval = *d
	}
	var secrets [][2]string
	switch src.GetKind() {
	case "GitRepository":
		s.Spec.Source.Git, secrets = translateGitRepository(sr, spec)
	case "OCIRepository":
		s.Spec.Source.OCI, secrets = translateOCIRepository(sr, spec)
	}
	if src.GetNamespace() != ks.GetNamespace() {
		for _, sec := range secrets {
			sr.untranslate(sec[0], sec[1], fmt.Sprintf("the Secret is in namespace %s and a Sync reads Secrets in its own namespace %s: copy it there",
				src.GetNamespace(), ks.GetNamespace()))
		}
		m.Warnings = append(m.Warnings, fmt.Sprintf("%s: its source %s is in another namespace; the Sync reads the repository itself",
			m.From, sr.name))
	}
	r.skip = append(r.skip, sr.skip...)
	if err := sr.err(); err != nil {
		r.errs = append(r.errs, err.Error())
	}
}

const reasonGitOnly = "a Sync fetches the whole repository with its own settings"

// translateGitRepository reads a GitRepository's spec; it returns the fields naming Secrets.
func translateGitRepository(r *specReader, spec map[string]any) (*v1alpha1.GitSource, [][2]string) {
	g := &v1alpha1.GitSource{URL: r.str(spec, "spec", "url")}
	if g.URL == "" {
		r.errs = append(r.errs, "spec.url: missing")
	}
	var secrets [][2]string
	if ref := r.object(spec, "spec", "ref"); ref != nil {
		g.Ref = gitRef(r, ref)
	}
	if n := r.localName(spec, "spec", "secretRef"); n != "" {
		g.SecretRef = &v1alpha1.LocalObjectReference{Name: n}
		secrets = append(secrets, [2]string{"spec.secretRef", n})
	}
	if v := r.object(spec, "spec", "verify"); v != nil {
		mode := r.str(v, "spec.verify", "mode")
		switch mode {
		case "", "head", "HEAD":
			mode = "HEAD"
		case "Tag", "TagAndHEAD":
		default:
			r.untranslate("spec.verify.mode", mode, "a Sync verifies HEAD, Tag or TagAndHEAD")
		}
		g.Verify = &v1alpha1.GitVerification{Mode: mode, SecretRef: v1alpha1.LocalObjectReference{Name: r.localName(v, "spec.verify", "secretRef")}}
		secrets = append(secrets, [2]string{"spec.verify.secretRef", g.Verify.SecretRef.Name})
		r.rest(v, "spec.verify", reasonNoSyncKey, "mode", "secretRef")
	}
	if p := r.str(spec, "spec", "provider"); p != "" && p != "generic" {
		r.untranslate("spec.provider", p, "a Sync authenticates with spec.source.git.secretRef only")
	}
	r.untranslate("spec.suspend", spec["suspend"], "the source is suspended and the Sync would fetch it: suspend the Sync after the migration if that is meant")
	r.rest(spec, "spec", reasonGitOnly, "url", "ref", "secretRef", "verify", "interval", "provider", "suspend")
	return g, secrets
}

// gitRef reads a GitRepository's spec.ref: Flux checks out commit over name over semver
// over tag over branch, and so does the translation (a Sync takes one of them).
func gitRef(r *specReader, ref map[string]any) v1alpha1.GitRef {
	branch, tag := r.str(ref, "spec.ref", "branch"), r.str(ref, "spec.ref", "tag")
	semver, name, commit := r.str(ref, "spec.ref", "semver"), r.str(ref, "spec.ref", "name"), r.str(ref, "spec.ref", "commit")
	r.rest(ref, "spec.ref", reasonNoSyncKey, "branch", "tag", "semver", "name", "commit")
	switch {
	case commit != "":
		if !commitSHA1.MatchString(commit) {
			r.untranslate("spec.ref.commit", commit, "a Sync takes a full 40-character SHA-1")
			return v1alpha1.GitRef{}
		}
		return v1alpha1.GitRef{Commit: commit}
	case name != "":
		g, ok := fluxRefName(name)
		if !ok {
			r.untranslate("spec.ref.name", name, "a Sync follows refs/heads/… and refs/tags/… only")
		}
		return g
	case semver != "":
		return v1alpha1.GitRef{SemVer: semver}
	case tag != "":
		return v1alpha1.GitRef{Tag: tag}
	}
	return v1alpha1.GitRef{Branch: branch}
}

// translateOCIRepository reads an OCIRepository's spec; it returns the fields naming Secrets.
func translateOCIRepository(r *specReader, spec map[string]any) (*v1alpha1.OCISource, [][2]string) {
	o := &v1alpha1.OCISource{URL: r.str(spec, "spec", "url"), Insecure: r.boolean(spec, "spec", "insecure")}
	if o.URL == "" {
		r.errs = append(r.errs, "spec.url: missing")
	}
	var secrets [][2]string
	if ref := r.object(spec, "spec", "ref"); ref != nil {
		o.Ref = v1alpha1.OCIRef{Tag: r.str(ref, "spec.ref", "tag")}
		// Flux takes digest over semver over tag.
		if d := r.str(ref, "spec.ref", "digest"); d != "" {
			o.Ref = v1alpha1.OCIRef{Digest: d}
		} else if sv := r.str(ref, "spec.ref", "semver"); sv != "" {
			o.Ref = v1alpha1.OCIRef{SemVer: sv}
		}
		r.rest(ref, "spec.ref", reasonNoSyncKey, "tag", "semver", "digest")
	}
	if ls := r.object(spec, "spec", "layerSelector"); ls != nil {
		o.LayerSelector = &v1alpha1.OCILayerSelector{MediaType: r.str(ls, "spec.layerSelector", "mediaType"),
			Operation: r.str(ls, "spec.layerSelector", "operation")}
		r.rest(ls, "spec.layerSelector", reasonNoSyncKey, "mediaType", "operation")
	}
	if n := r.localName(spec, "spec", "secretRef"); n != "" {
		o.SecretRef = &v1alpha1.LocalObjectReference{Name: n}
		secrets = append(secrets, [2]string{"spec.secretRef", n})
	}
	if n := r.localName(spec, "spec", "certSecretRef"); n != "" {
		o.CertSecretRef = &v1alpha1.LocalObjectReference{Name: n}
		secrets = append(secrets, [2]string{"spec.certSecretRef", n})
	}
	if v := r.object(spec, "spec", "verify"); v != nil {
		if p := r.str(v, "spec.verify", "provider"); p != "" && p != "cosign" {
			r.untranslate("spec.verify.provider", p, "a Sync verifies cosign signatures only")
		}
		o.Verify = &v1alpha1.OCIVerification{Provider: "cosign", SecretRef: v1alpha1.LocalObjectReference{Name: r.localName(v, "spec.verify", "secretRef")}}
		secrets = append(secrets, [2]string{"spec.verify.secretRef", o.Verify.SecretRef.Name})
		r.rest(v, "spec.verify", "a Sync verifies key-pair signatures only (no keyless identity)", "provider", "secretRef")
	}
	if p := r.str(spec, "spec", "provider"); p != "" && p != "generic" {
		r.untranslate("spec.provider", p, "a Sync authenticates with spec.source.oci.secretRef only")
	}
	r.untranslate("spec.suspend", spec["suspend"], "the source is suspended and the Sync would fetch it: suspend the Sync after the migration if that is meant")
	r.rest(spec, "spec", "a Sync pulls the artifact with its own settings", "url", "ref", "layerSelector", "secretRef",
		"certSecretRef", "insecure", "verify", "interval", "provider", "suspend")
	return o, secrets
}
