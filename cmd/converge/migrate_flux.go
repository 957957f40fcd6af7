package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// MigratedFromAnnotation on a Sync names the Flux Kustomization or Argo CD Application it
// was translated from.
const MigratedFromAnnotation = "converge.dev/migrated-from"

// migration is one Flux Kustomization or Argo CD Application and the Sync that replaces it.
type migration struct {
	// From is Kind namespace/name of the old object.
	From string
	// Sync is the translation; nil when the old object cannot be translated at all (its
	// source is of a kind a Sync cannot read).
	Sync *v1alpha1.Sync
	// NotTranslated are the old object's fields no Sync field expresses.
	NotTranslated []untranslated
	// Warnings are choices the translation made that a user should check; they do not
	// make the exit code non-zero.
	Warnings []string
	// Applied are the IDs (ns_name_group_kind) of the objects the old tool applied, as its
	// status lists them: the Sync's inventory must hold every one before the old object
	// is suspended.
	Applied []string

	old *unstructured.Unstructured
}

const (
	reasonBuild     = "a kustomize build field the Sync does not have: put it in the source's kustomization.yaml"
	reasonNoSyncKey = "no Sync equivalent"
	// Flux v1 replaced patchesStrategicMerge and patchesJson6902 with patches.
	reasonBuildPatches = "Flux v1 replaced it with patches: write it as spec.patches"
	// A Kustomization's spec.timeout and a Sync's spec.timeout bound the readiness wait.
	maxSyncTimeout = time.Hour
)

// fluxBuildFields are the Kustomization fields that change the render and that a Sync has
// not: v1beta2's, which Flux's v1 replaced with patches.
var fluxBuildFields = []string{"patchesStrategicMerge", "patchesJson6902"}

// translateKustomization translates a Flux Kustomization and its source (nil when the
// source's kind is not one a Sync reads) into a Sync in the Kustomization's namespace, of
// the same name, adopting the objects Flux applied. A malformed field is an error naming
// the object and the field.
func translateKustomization(ks, src *unstructured.Unstructured) (*migration, error) {
	r := &specReader{name: describeObject(ks)}
	m := &migration{From: r.name, old: ks}
	spec := r.object(ks.Object, "", "spec")
	if spec == nil {
		return nil, fmt.Errorf("%s: no spec", r.name)
	}
	s := newSync(ks, m.From)
	kind := r.str(r.object(spec, "spec", "sourceRef"), "spec.sourceRef", "kind")
	if src == nil {
		r.untranslate("spec.sourceRef.kind", kind, "a Sync reads git repositories and OCI artifacts only")
	} else {
		translateFluxSource(r, m, s, ks, src)
	}
	s.Spec.Path = cleanPath(r.str(spec, "spec", "path"))
	translateFluxApply(r, s, spec)
	translateFluxBuild(r, s, spec)
	translateFluxInline(r, s, spec)
	for _, f := range fluxBuildFields {
		r.untranslate("spec."+f, spec[f], reasonBuildPatches)
	}
	r.untranslate("spec.kubeConfig", spec["kubeConfig"], "a Sync applies to its own cluster only")
	r.rest(spec, "spec", reasonNoSyncKey, append(slices.Concat(fluxBuildFields, fluxInlineFields), "kubeConfig", "sourceRef", "path",
		"interval", "retryInterval", "timeout", "prune", "wait", "force", "suspend", "targetNamespace",
		"serviceAccountName", "deletionPolicy", "dependsOn", "healthChecks", "healthCheckExprs",
		"postBuild", "decryption")...)
	m.Applied = fluxInventory(r, ks)
	if err := r.err(); err != nil {
		return nil, err
	}
	if src != nil {
		m.Sync = s
	}
	m.NotTranslated = r.skip
	return m, nil
}

// newSync is the Sync replacing old: same namespace and name, adopting what old applied.
func newSync(old *unstructured.Unstructured, from string) *v1alpha1.Sync {
	return &v1alpha1.Sync{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Sync"},
		ObjectMeta: metav1.ObjectMeta{Name: old.GetName(), Namespace: old.GetNamespace(),
			Annotations: map[string]string{MigratedFromAnnotation: from}},
		// Adopt: the objects carry no owner annotation of ours yet and name Flux's or
		// Argo CD's field manager; without it the Sync would refuse them, untouched.
		Spec: v1alpha1.SyncSpec{Adopt: true},
	}
}

// translateFluxApply reads how the Kustomization applies: interval, prune, wait, force...
func translateFluxApply(r *specReader, s *v1alpha1.Sync, spec map[string]any) {
	if d := r.duration(spec, "spec", "interval", 2*time.Second, 8760*time.Hour); d != nil {
		// The source's own interval may have set a shorter one (translateFluxSource).
		if s.Spec.Interval.Duration == 0 || d.Duration < s.Spec.Interval.Duration {
			s.Spec.Interval = *d
		}
	}
	s.Spec.RetryInterval = r.duration(spec, "spec", "retryInterval", time.Second, 8760*time.Hour)
	s.Spec.Timeout = r.duration(spec, "spec", "timeout", time.Second, maxSyncTimeout)
	s.Spec.Prune = r.boolean(spec, "spec", "prune")
	s.Spec.Wait = r.boolean(spec, "spec", "wait")
	s.Spec.Force = r.boolean(spec, "spec", "force")
	s.Spec.Suspend = r.boolean(spec, "spec", "suspend")
	s.Spec.TargetNamespace = r.str(spec, "spec", "targetNamespace")
	s.Spec.ServiceAccountName = r.str(spec, "spec", "serviceAccountName")
	// Flux's default, MirrorPrune, deletes the objects with the Kustomization when it prunes.
	switch p := r.str(spec, "spec", "deletionPolicy"); p {
	case "", "MirrorPrune":
		s.Spec.DeletionPolicy = v1alpha1.DeletionPolicyOrphan
		if s.Spec.Prune {
			s.Spec.DeletionPolicy = v1alpha1.DeletionPolicyDelete
		}
	case "Delete", "Orphan":
		s.Spec.DeletionPolicy = p
	default:
		s.Spec.DeletionPolicy = v1alpha1.DeletionPolicyDelete
		r.untranslate("spec.deletionPolicy", p, "the Sync deletes without waiting for termination (deletionPolicy Delete)")
	}
	for i, d := range r.objects(spec, "spec", "dependsOn") {
		f := fmt.Sprintf("spec.dependsOn[%d]", i)
		s.Spec.DependsOn = append(s.Spec.DependsOn, v1alpha1.DependencyReference{
			Name: r.str(d, f, "name"), Namespace: r.str(d, f, "namespace")})
		r.rest(d, f, "the Sync waits for the dependency's Ready condition only", "name", "namespace")
	}
	for i, h := range r.objects(spec, "spec", "healthChecks") {
		f := fmt.Sprintf("spec.healthChecks[%d]", i)
		s.Spec.HealthChecks = append(s.Spec.HealthChecks, v1alpha1.HealthCheck{APIVersion: r.str(h, f, "apiVersion"),
			Kind: r.str(h, f, "kind"), Name: r.str(h, f, "name"), Namespace: r.str(h, f, "namespace")})
		r.rest(h, f, reasonNoSyncKey, "apiVersion", "kind", "name", "namespace")
	}
	for i, h := range r.objects(spec, "spec", "healthCheckExprs") {
		f := fmt.Sprintf("spec.healthCheckExprs[%d]", i)
		s.Spec.HealthCheckExprs = append(s.Spec.HealthCheckExprs, v1alpha1.HealthCheckExpr{
			APIVersion: r.str(h, f, "apiVersion"), Kind: r.str(h, f, "kind"), Current: r.str(h, f, "current"),
			InProgress: r.str(h, f, "inProgress"), Failed: r.str(h, f, "failed")})
		r.rest(h, f, reasonNoSyncKey, "apiVersion", "kind", "current", "inProgress", "failed")
	}
}

// translateFluxBuild reads what the Kustomization does to the render that a Sync does too:
// post-build substitution and SOPS decryption.
func translateFluxBuild(r *specReader, s *v1alpha1.Sync, spec map[string]any) {
	if pb := r.object(spec, "spec", "postBuild"); pb != nil {
		out := &v1alpha1.PostBuild{}
		if vars := r.object(pb, "spec.postBuild", "substitute"); len(vars) > 0 {
			out.Substitute = map[string]string{}
			for k := range vars {
				out.Substitute[k] = r.str(vars, "spec.postBuild.substitute", k)
			}
		}
		for i, ref := range r.objects(pb, "spec.postBuild", "substituteFrom") {
			f := fmt.Sprintf("spec.postBuild.substituteFrom[%d]", i)
			out.SubstituteFrom = append(out.SubstituteFrom, v1alpha1.SubstituteReference{
				Kind: r.str(ref, f, "kind"), Name: r.str(ref, f, "name"), Optional: r.boolean(ref, f, "optional")})
			r.rest(ref, f, reasonNoSyncKey, "kind", "name", "optional")
		}
		r.rest(pb, "spec.postBuild", reasonNoSyncKey, "substitute", "substituteFrom")
		if len(out.Substitute) > 0 || len(out.SubstituteFrom) > 0 {
			s.Spec.PostBuild = out
		}
	}
	if dec := r.object(spec, "spec", "decryption"); dec != nil {
		p := r.str(dec, "spec.decryption", "provider")
		if p != "sops" {
			r.untranslate("spec.decryption.provider", p, "a Sync decrypts sops only")
		} else {
			s.Spec.Decryption = &v1alpha1.Decryption{Provider: p}
			if n := r.localName(dec, "spec.decryption", "secretRef"); n != "" {
				s.Spec.Decryption.SecretRef = &v1alpha1.LocalObjectReference{Name: n}
			}
		}
		r.rest(dec, "spec.decryption", "a Sync reads age keys from spec.decryption.secretRef only (no cloud KMS identity)",
			"provider", "secretRef")
	}
}

// fluxInventory is the IDs of the objects the Kustomization applied (status.inventory).
func fluxInventory(r *specReader, ks *unstructured.Unstructured) []string {
	status := r.object(ks.Object, "", "status")
	inv := r.object(status, "status", "inventory")
	var ids []string
	for i, e := range r.objects(inv, "status.inventory", "entries") {
		if id := r.str(e, fmt.Sprintf("status.inventory.entries[%d]", i), "id"); id != "" {
			ids = append(ids, id)
		}
	}
	return ids
}

// fluxRefName translates a GitRepository's spec.ref.name (a full git reference).
func fluxRefName(name string) (v1alpha1.GitRef, bool) {
	if b, ok := strings.CutPrefix(name, "refs/heads/"); ok {
		return v1alpha1.GitRef{Branch: b}, true
	}
	if t, ok := strings.CutPrefix(name, "refs/tags/"); ok {
		return v1alpha1.GitRef{Tag: t}, true
	}
	return v1alpha1.GitRef{}, false
}
