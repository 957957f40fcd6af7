package daemon

import (
	"context"
	"fmt"

	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/sources/pipeline"
	"github.com/converge-dev/converge/sources/sops"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// decryption is how s's SOPS-encrypted objects are decrypted: with the age keys of
// spec.decryption.secretRef (decryptionKeys), within --build-timeout, the decryption program
// within --render-memory-limit and holding a render slot (--render-slots), as a render
// child does. An encrypted object without spec.decryption is refused: applying ciphertext
// is never what its author wants.
func (r *reconciler) decryption(s *v1alpha1.Sync) pipeline.Decryption {
	d := s.Spec.Decryption
	if d == nil {
		return pipeline.Decryption{Hints: pipeline.Hints{NoKeys: fmt.Sprintf("set spec.decryption (provider: sops, secretRef: a Secret "+
			"of namespace %s with the age identity in an entry ending in %s)", s.Namespace, sops.AgeKeySuffix)}}
	}
	dec := pipeline.Decryption{
		Keys:      func(ctx context.Context) (*sops.Keys, error) { return r.decryptionKeys(ctx, s) },
		Timeout:   r.render.buildTimeout(),
		MaxMemory: r.render.limits.MaxRenderMemory,
		Slot: func(ctx context.Context) (func(), error) {
			return sources.AcquireRenderSlot(ctx, r.render.limits, s.Namespace)
		},
		Hints: pipeline.Hints{Invalid: "the source must be fixed; nothing was applied or pruned", Timeout: "--build-timeout",
			Memory: "--render-memory-limit"},
	}
	if d.SecretRef != nil {
		dec.Hints.WrongKey = fmt.Sprintf("add the age identity of a listed recipient to Secret %s/%s (an entry ending in %s); nothing was applied or pruned",
			s.Namespace, d.SecretRef.Name, sops.AgeKeySuffix)
	}
	return dec
}

// decryptionKeys reads the age keys of spec.decryption.secretRef as the Sync's identity
// (I13): a tenant who may not read a Secret cannot have the daemon decrypt with it. It is
// called only when an object is encrypted, so a Sync without secrets costs no request.
func (r *reconciler) decryptionKeys(ctx context.Context, s *v1alpha1.Sync) (*sops.Keys, error) {
	ref := s.Spec.Decryption.SecretRef
	if ref == nil {
		return nil, &pipeline.DecryptError{Terminal: true, Err: fmt.Errorf("spec.decryption.secretRef is required: "+
			"converge decrypts only with age keys read from a Secret (entries ending in %s)", sops.AgeKeySuffix)}
	}
	sec, err := r.engines.secret(ctx, s, ref.Name)
	if err != nil {
		return nil, fmt.Errorf("spec.decryption.secretRef: Secret %s/%s read as %s: %w", s.Namespace, ref.Name, r.engines.identity(s), err)
	}
	keys, err := sops.KeysFromSecret(sec.Data)
	if err != nil {
		return nil, fmt.Errorf("spec.decryption.secretRef: Secret %s/%s: %w", s.Namespace, ref.Name, err)
	}
	return keys, nil
}
