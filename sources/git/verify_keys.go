package git

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	pgperrors "github.com/ProtonMail/go-crypto/openpgp/errors"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"
)

// sshNamespace is the sshsig namespace git signs commits and tags in (gpg.format=ssh): a
// signature made for another purpose (a file, an email) is not a git signature.
const sshNamespace = "git"

// trustedKeys are the parsed keys of a Verification.
type trustedKeys struct {
	pgp []pgpKey
	ssh []sshKey
}

// pgpKey is one armored PGP key block, kept as text for go-git's Commit.Verify.
type pgpKey struct {
	name    string // the Verification.Keys entry
	armored string
}

type sshKey struct {
	name string // the Verification.Keys entry
	key  ssh.PublicKey
}

// parseKeys reads every entry of keys: a value that is neither an armored PGP public key
// block nor SSH authorized_keys lines is an error naming it, not a key silently left out.
func parseKeys(keys map[string][]byte) (trustedKeys, error) {
	if len(keys) == 0 {
		return trustedKeys{}, fmt.Errorf("%w: the verification Secret holds no key; add armored PGP public keys or SSH authorized_keys lines", ErrNoKeys)
	}
	var tk trustedKeys
	for _, name := range slices.Sorted(maps.Keys(keys)) {
		v := keys[name]
		if strings.HasSuffix(name, ".asc") || bytes.Contains(v, []byte("-----BEGIN PGP PUBLIC KEY BLOCK-----")) {
			el, err := openpgp.ReadArmoredKeyRing(bytes.NewReader(v))
			if err == nil && len(el) == 0 {
				err = errors.New("no key in it")
			}
			if err != nil {
				return trustedKeys{}, fmt.Errorf("key %q: not an armored PGP public key block (%v): %w", name, err, ErrNoKeys)
			}
			tk.pgp = append(tk.pgp, pgpKey{name: name, armored: string(v)})
			continue
		}
		ks, err := parseAuthorizedKeys(v)
		if err != nil {
			return trustedKeys{}, fmt.Errorf("key %q: %v; want an armored PGP public key block or SSH authorized_keys lines: %w", name, err, ErrNoKeys)
		}
		for _, k := range ks {
			tk.ssh = append(tk.ssh, sshKey{name: name, key: k})
		}
	}
	return tk, nil
}

// parseAuthorizedKeys reads SSH public keys one per line, as in authorized_keys (or git's
// allowed_signers: the principals parse as options). Unlike ssh.ParseAuthorizedKey over the
// whole value, a line that does not parse is an error, not skipped.
func parseAuthorizedKeys(v []byte) ([]ssh.PublicKey, error) {
	var keys []ssh.PublicKey
	for i, line := range strings.Split(string(v), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
		if err != nil {
			return nil, fmt.Errorf("line %d is not an SSH public key (%v)", i+1, err)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errors.New("empty")
	}
	return keys, nil
}

// signed is a commit or tag to check: its signature, the bytes that were signed, and
// go-git's PGP verification of it.
type signed struct {
	object    string // "commit <sha>", "tag <name>"
	signature string
	payload   func(plumbing.EncodedObject) error
	pgp       func(armoredKeyRing string) (*openpgp.Entity, error)
	sign      string // how to sign the object, for the errors
}

// check verifies s's signature against the trusted keys.
func (tk trustedKeys) check(s signed) (Signature, error) {
	if s.signature == "" {
		return Signature{}, fmt.Errorf("%s is %w: %s", s.object, ErrUnsigned, s.sign)
	}
	if strings.Count(s.signature, "-----BEGIN ") > 1 {
		// As git: several signatures do not reduce to one signer.
		return Signature{}, fmt.Errorf("%s carries several signatures: %w", s.object, ErrBadSignature)
	}
	switch signatureKind(s.signature) {
	case "PGP":
		return tk.checkPGP(s)
	case "SSH":
		return tk.checkSSH(s)
	}
	return Signature{}, fmt.Errorf("%s: %w: its signature is neither PGP nor SSH (X.509 is not supported)", s.object, ErrBadSignature)
}

func (tk trustedKeys) checkPGP(s signed) (Signature, error) {
	for _, k := range tk.pgp {
		e, err := s.pgp(k.armored)
		if err == nil {
			return Signature{Object: s.object, Key: "PGP key " + strings.ToUpper(hex.EncodeToString(e.PrimaryKey.Fingerprint)), Source: k.name}, nil
		}
		if !errors.Is(err, pgperrors.ErrUnknownIssuer) {
			// The key is trusted and the signature names it: the bytes do not match.
			return Signature{}, fmt.Errorf("%s: %w by PGP key %s of %q (%v): the object was altered after it was signed, or the signature is corrupt",
				s.object, ErrBadSignature, pgpIssuer(s.signature), k.name, err)
		}
	}
	return Signature{}, fmt.Errorf("%s is %w (PGP key %s, %d trusted PGP key entries): add its public key to the verification Secret, or %s",
		s.object, ErrUnknownKey, pgpIssuer(s.signature), len(tk.pgp), s.sign)
}

// pgpIssuer names the key an armored PGP signature says made it, for messages.
func pgpIssuer(sig string) string {
	block, err := armor.Decode(strings.NewReader(sig))
	if err != nil {
		return "(unreadable signature)"
	}
	p, err := packet.Read(block.Body)
	ps, ok := p.(*packet.Signature)
	switch {
	case err != nil || !ok:
		return "(unreadable signature)"
	case len(ps.IssuerFingerprint) > 0:
		return strings.ToUpper(hex.EncodeToString(ps.IssuerFingerprint))
	case ps.IssuerKeyId != nil:
		return fmt.Sprintf("ID %016X", *ps.IssuerKeyId)
	}
	return "(no issuer)"
}

func (tk trustedKeys) checkSSH(s signed) (Signature, error) {
	sig, err := sshsig.Unarmor([]byte(s.signature))
	if err != nil {
		return Signature{}, fmt.Errorf("%s: %w: unreadable SSH signature (%v)", s.object, ErrBadSignature, err)
	}
	fp := ssh.FingerprintSHA256(sig.PublicKey)
	for _, k := range tk.ssh {
		if ssh.FingerprintSHA256(k.key) != fp {
			continue
		}
		if err := verifySSH(s, sig, k.key); err != nil {
			return Signature{}, fmt.Errorf("%s: %w by SSH key %s of %q (%v): the object was altered after it was signed, or the signature is corrupt",
				s.object, ErrBadSignature, fp, k.name, err)
		}
		return Signature{Object: s.object, Key: "SSH key " + fp, Source: k.name}, nil
	}
	return Signature{}, fmt.Errorf("%s is %w (SSH key %s, %d trusted SSH keys): add its public key to the verification Secret, or %s",
		s.object, ErrUnknownKey, fp, len(tk.ssh), s.sign)
}

// verifySSH checks an sshsig signature over s's payload in git's namespace. An RSA signature
// over SHA-1 (ssh-rsa) never gets here: sshsig.Unarmor refuses it, as ssh-keygen -Y verify does.
func verifySSH(s signed, sig *sshsig.Signature, key ssh.PublicKey) error {
	o := &plumbing.MemoryObject{}
	if err := s.payload(o); err != nil {
		return err
	}
	rd, err := o.Reader()
	if err != nil {
		return err
	}
	defer func() { _ = rd.Close() }()
	return sshsig.Verify(rd, sig, key, sig.HashAlgorithm, sshNamespace)
}
