package daemon

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/sources/oci"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// ociSource turns the Sync's spec.source.oci and its Secrets into a sources.Source. Both
// Secrets are read as the Sync's identity, as the git Secret is: the credentials go to a
// registry the Sync's author chose, so only who may read the Secret may name it (I13).
func (r *reconciler) ociSource(ctx context.Context, s *v1alpha1.Sync) (sources.Source, error) {
	o := s.Spec.Source.OCI
	a := oci.Artifact{URL: o.URL, Ref: oci.Ref{Tag: o.Ref.Tag, SemVer: o.Ref.SemVer, Digest: o.Ref.Digest}, Insecure: o.Insecure}
	if o.LayerSelector != nil {
		a.Layer = oci.LayerSelector{MediaType: o.LayerSelector.MediaType, Operation: o.LayerSelector.Operation}
	}
	if o.SecretRef != nil {
		sec, err := r.ociSecret(ctx, s, "secretRef", o.SecretRef.Name, corev1.DockerConfigJsonKey)
		if err != nil {
			return sources.Source{}, err
		}
		a.Auth.DockerConfigJSON = sec
	}
	if o.CertSecretRef != nil {
		ca, err := r.ociSecret(ctx, s, "certSecretRef", o.CertSecretRef.Name, "ca.crt")
		if err != nil {
			return sources.Source{}, err
		}
		a.Auth.CA = ca
	}
	var err error
	if a.Verify, err = r.cosignVerification(ctx, s, "spec.source.oci.verify", o.Verify); err != nil {
		return sources.Source{}, err
	}
	return sources.Source{OCI: a, Path: s.Spec.Path}, nil
}

// cosignVerification returns the trusted keys of v (the field named field), nil without v.
// They are read on every reconcile as the Sync's identity, as spec.source.git.verify's
// keys: a rotated or revoked key counts from the next reconcile, and the artifact (cached
// or not) is verified against these keys on every fetch.
func (r *reconciler) cosignVerification(ctx context.Context, s *v1alpha1.Sync, field string, v *v1alpha1.OCIVerification) (*oci.Verification, error) {
	if v == nil {
		return nil, nil
	}
	sec, err := r.engines.secret(ctx, s, v.SecretRef.Name)
	if err != nil {
		return nil, &keysError{fmt.Errorf("%s.secretRef: Secret %s/%s read as %s: %w",
			field, s.Namespace, v.SecretRef.Name, r.engines.identity(s), err)}
	}
	return &oci.Verification{Provider: v.Provider, Keys: sec.Data}, nil
}

// ociSecret returns key of the Secret name, read as the Sync's identity.
func (r *reconciler) ociSecret(ctx context.Context, s *v1alpha1.Sync, field, name, key string) ([]byte, error) {
	sec, err := r.engines.secret(ctx, s, name)
	if err != nil {
		return nil, fmt.Errorf("spec.source.oci.%s: Secret %s/%s read as %s: %w", field, s.Namespace, name, r.engines.identity(s), err)
	}
	v, ok := sec.Data[key]
	if !ok {
		return nil, fmt.Errorf("spec.source.oci.%s: Secret %s/%s has no key %s", field, s.Namespace, name, key)
	}
	return v, nil
}
