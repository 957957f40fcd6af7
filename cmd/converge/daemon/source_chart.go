package daemon

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/sources/helmrepo"
	"github.com/converge-dev/converge/sources/oci"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// chartSource turns spec.source.helmRepository and spec.source.helm's chart and version into
// a sources.Source: an HTTP repository's chart (Source.Chart), or an OCI registry's as an
// artifact (sources.OCIChart). Its Secrets are read as the Sync's identity, as the git and
// OCI Secrets are (I13).
func (r *reconciler) chartSource(ctx context.Context, s *v1alpha1.Sync) (sources.Source, error) {
	hr, h := s.Spec.Source.HelmRepository, s.Spec.Source.Helm
	if h == nil || h.Chart == "" {
		return sources.Source{}, fmt.Errorf("spec.source.helmRepository: set spec.source.helm.chart, the chart's name in the repository")
	}
	var user, pass string
	var dockerConfig, ca []byte
	if hr.SecretRef != nil {
		sec, err := r.repositorySecret(ctx, s, "secretRef", hr.SecretRef.Name)
		if err != nil {
			return sources.Source{}, err
		}
		user, pass, dockerConfig = string(sec.Data["username"]), string(sec.Data["password"]), sec.Data[corev1.DockerConfigJsonKey]
		if user == "" && pass == "" && len(dockerConfig) == 0 {
			return sources.Source{}, fmt.Errorf("spec.source.helmRepository.secretRef: Secret %s/%s has neither username and password nor %s",
				s.Namespace, hr.SecretRef.Name, corev1.DockerConfigJsonKey)
		}
	}
	if hr.CertSecretRef != nil {
		sec, err := r.repositorySecret(ctx, s, "certSecretRef", hr.CertSecretRef.Name)
		if err != nil {
			return sources.Source{}, err
		}
		if ca = sec.Data["ca.crt"]; ca == nil {
			return sources.Source{}, fmt.Errorf("spec.source.helmRepository.certSecretRef: Secret %s/%s has no key ca.crt", s.Namespace, hr.CertSecretRef.Name)
		}
	}
	if !sources.IsOCIRepository(hr.URL) {
		if hr.Verify != nil || hr.Insecure {
			return sources.Source{}, fmt.Errorf("spec.source.helmRepository: verify and insecure apply to oci:// repositories only")
		}
		return sources.Source{Chart: helmrepo.Chart{Repository: hr.URL, Name: h.Chart, Version: h.Version,
			Auth: helmrepo.Auth{Username: user, Password: pass, CA: ca, PassCredentials: hr.PassCredentials}}}, nil
	}
	a := sources.OCIChart(hr.URL, h.Chart, h.Version)
	a.Insecure = hr.Insecure
	a.Auth = oci.Auth{DockerConfigJSON: dockerConfig, Username: user, Password: pass, CA: ca}
	var err error
	if a.Verify, err = r.cosignVerification(ctx, s, "spec.source.helmRepository.verify", hr.Verify); err != nil {
		return sources.Source{}, err
	}
	return sources.Source{OCI: a, Path: sources.ChartPath}, nil
}

// repositorySecret reads the Secret name of spec.source.helmRepository.<field> as the
// Sync's identity.
func (r *reconciler) repositorySecret(ctx context.Context, s *v1alpha1.Sync, field, name string) (*corev1.Secret, error) {
	sec, err := r.engines.secret(ctx, s, name)
	if err != nil {
		return nil, fmt.Errorf("spec.source.helmRepository.%s: Secret %s/%s read as %s: %w", field, s.Namespace, name, r.engines.identity(s), err)
	}
	return sec, nil
}
