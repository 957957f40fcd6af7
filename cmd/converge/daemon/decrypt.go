package daemon

import (
	"context"
	"errors"
	"fmt"

	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/sources/sops"
	"github.com/converge-dev/converge/status"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// reasonDecryptionFailed is the Ready=False reason of a render that could not be
// decrypted: not BuildFailed, since the manifests rendered and the fix is usually in the
// keys (the Sync's key Secret), not in the repository.
const reasonDecryptionFailed = "DecryptionFailed"

// decryptError is a decryption failure and whether waiting for a new revision (terminal)
// or retrying with back-off (a key Secret may be fixed without any event we watch) fits.
type decryptError struct {
	err      error
	terminal bool
}

func (e *decryptError) Error() string { return e.err.Error() }
func (e *decryptError) Unwrap() error { return e.err }

// decrypt returns b with its SOPS-encrypted objects decrypted in memory with the age keys
// of spec.decryption.secretRef, read as the Sync's identity (I13): a tenant who may not
// read a Secret cannot have the daemon decrypt with it. The key Secret is read only when
// an object is encrypted, so a Sync without secrets costs no request. An encrypted object
// without spec.decryption is refused: applying ciphertext is never what its author wants.
// On error nothing may be applied or pruned (I8).
func (r *reconciler) decrypt(ctx context.Context, s *v1alpha1.Sync, b *sources.Bundle) (*sources.Bundle, error) {
	encrypted := false
	for _, o := range b.Objects {
		if sops.Encrypted(o) {
			encrypted = true
			break
		}
	}
	if !encrypted {
		return b, nil
	}
	d := s.Spec.Decryption
	if d == nil {
		_, err := sops.Decrypt(ctx, b, nil)
		return nil, &decryptError{terminal: true, err: fmt.Errorf("%w\nset spec.decryption (provider: sops, secretRef: a Secret "+
			"of namespace %s with the age identity in an entry ending in %s)", err, s.Namespace, sops.AgeKeySuffix)}
	}
	if d.SecretRef == nil {
		return nil, &decryptError{terminal: true, err: fmt.Errorf("spec.decryption.secretRef is required: "+
			"converge decrypts only with age keys read from a Secret (entries ending in %s)", sops.AgeKeySuffix)}
	}
	sec, err := r.engines.secret(ctx, s, d.SecretRef.Name)
	if err != nil {
		return nil, &decryptError{err: fmt.Errorf("spec.decryption.secretRef: Secret %s/%s read as %s: %w",
			s.Namespace, d.SecretRef.Name, r.engines.identity(s), err)}
	}
	keys, err := sops.KeysFromSecret(sec.Data)
	if err != nil {
		return nil, &decryptError{err: fmt.Errorf("spec.decryption.secretRef: Secret %s/%s: %w", s.Namespace, d.SecretRef.Name, err)}
	}
	dctx, cancel := context.WithTimeout(ctx, r.render.buildTimeout())
	defer cancel()
	out, err := sops.Decrypt(dctx, b, keys)
	if err != nil && ctx.Err() == nil && errors.Is(dctx.Err(), context.DeadlineExceeded) {
		return nil, &decryptError{err: fmt.Errorf("decryption did not finish within %s (--build-timeout): %w", r.render.buildTimeout(), err)}
	}
	if err != nil {
		hint := "\nthe source must be fixed; nothing was applied or pruned"
		if errors.Is(err, sops.ErrKey) {
			hint = fmt.Sprintf("\nadd the age identity of a listed recipient to Secret %s/%s (an entry ending in %s); nothing was applied or pruned",
				s.Namespace, d.SecretRef.Name, sops.AgeKeySuffix)
		}
		// A wrong key is fixed in the key Secret, which no watch of ours sees: retry.
		return nil, &decryptError{err: fmt.Errorf("%w%s", err, hint), terminal: !errors.Is(err, sops.ErrKey)}
	}
	return out, nil
}

// decryptFailed is the outcome of a failed decrypt: Ready=False, DecryptionFailed.
func (r *reconciler) decryptFailed(s *v1alpha1.Sync, o status.Outcome, err error) status.Outcome {
	var de *decryptError
	terminal := errors.As(err, &de) && de.terminal
	return r.fail(s, o, reasonDecryptionFailed, err, terminal)
}
