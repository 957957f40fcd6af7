package git

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha512"
	"errors"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"
)

// payloadOf is a signed object's payload function over fixed bytes.
func payloadOf(b []byte) func(plumbing.EncodedObject) error {
	return func(o plumbing.EncodedObject) error {
		w, err := o.Writer()
		if err != nil {
			return err
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
		return w.Close()
	}
}

// sshSign signs payload with signer in namespace, armored as git stores it.
func sshSign(t *testing.T, signer ssh.Signer, payload []byte, namespace string) string {
	t.Helper()
	sig, err := sshsig.Sign(bytes.NewReader(payload), signer, sshsig.HashSHA512, namespace)
	if err != nil {
		t.Fatal(err)
	}
	return string(sshsig.Armor(sig))
}

// sha1Sign makes an sshsig signature in namespace "git" whose RSA signature is over SHA-1
// (ssh-rsa), which ssh-keygen no longer makes nor accepts.
func sha1Sign(t *testing.T, signer ssh.AlgorithmSigner, payload []byte) string {
	t.Helper()
	h := sha512.Sum512(payload)
	data := append([]byte("SSHSIG"), ssh.Marshal(struct{ Namespace, Reserved, HashAlgorithm, Hash string }{
		Namespace: "git", HashAlgorithm: "sha512", Hash: string(h[:])})...)
	sig, err := signer.SignWithAlgorithm(rand.Reader, data, ssh.KeyAlgoRSA)
	if err != nil {
		t.Fatal(err)
	}
	return string(sshsig.Armor(&sshsig.Signature{Version: 1, PublicKey: signer.PublicKey(), Namespace: "git",
		HashAlgorithm: sshsig.HashSHA512, Signature: sig}))
}

// TestCheckSignatureForms: signatures git itself would not accept are refused as not
// verifying, even by a trusted key: one made for another sshsig namespace (a signed file
// passed off as a commit signature), an RSA signature over SHA-1 (ssh-rsa), several
// signature blocks, and an X.509 signature; the same key's signature in namespace "git"
// verifies. (sshsig's parser is what refuses ssh-rsa; the case guards that.)
func TestCheckSignatureForms(t *testing.T) {
	payload := []byte("tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\n\nsigned\n")
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ed, err := ssh.NewSignerFromKey(edKey)
	if err != nil {
		t.Fatal(err)
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	rsaSigner, err := ssh.NewSignerFromKey(rsaKey)
	if err != nil {
		t.Fatal(err)
	}
	trusted := trustedKeys{ssh: []sshKey{{name: "ed", key: ed.PublicKey()}, {name: "rsa", key: rsaSigner.PublicKey()}}}
	good := sshSign(t, ed, payload, "git")

	tests := []struct {
		name      string
		signature string
		wantErr   error
		wantMsg   string
	}{
		{name: "namespace git", signature: good},
		{name: "RSA with SHA-512", signature: sshSign(t, rsaSigner, payload, "git")},
		{name: "namespace file", signature: sshSign(t, ed, payload, "file"), wantErr: ErrBadSignature, wantMsg: "namespace does not match"},
		{name: "RSA with SHA-1", signature: sha1Sign(t, rsaSigner.(ssh.AlgorithmSigner), payload), wantErr: ErrBadSignature, wantMsg: `invalid signature format "ssh-rsa"`},
		{name: "two signatures", signature: good + good, wantErr: ErrBadSignature, wantMsg: "carries several signatures"},
		{name: "X.509", signature: "-----BEGIN SIGNED MESSAGE-----\nMIIB\n-----END SIGNED MESSAGE-----\n", wantErr: ErrBadSignature, wantMsg: "neither PGP nor SSH"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := trusted.check(signed{object: "commit x", signature: tt.signature, payload: payloadOf(payload),
				pgp: nil, sign: "sign it"})
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("check: %v", err)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("check error = %v, want %v containing %q", err, tt.wantErr, tt.wantMsg)
			}
		})
	}
}
