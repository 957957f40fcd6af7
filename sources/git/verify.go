package git

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	gogit "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"

	"github.com/converge-dev/converge/sources/signature"
)

// VerifyMode says which signatures Fetch checks (Verification.Mode), as the modes of
// Flux's GitRepository spec.verify.
type VerifyMode string

const (
	// VerifyHEAD checks the signature of the fetched commit.
	VerifyHEAD VerifyMode = "HEAD"
	// VerifyTag checks the signature of the annotated tag a Tag or SemVer ref resolved to.
	VerifyTag VerifyMode = "Tag"
	// VerifyTagAndHEAD checks both the tag's and the commit's signatures.
	VerifyTagAndHEAD VerifyMode = "TagAndHEAD"
)

// Verification asks Fetch to check signatures against trusted public keys before a commit
// is exported: a commit that fails is never written out, so nothing renders it.
type Verification struct {
	// Mode says what is checked; empty means VerifyHEAD.
	Mode VerifyMode
	// Keys are the trusted public keys by name (the data keys of a Secret): each value an
	// ASCII-armored PGP public key block (one or more keys), or SSH public keys in
	// authorized_keys format for commits signed with gpg.format=ssh.
	Keys map[string][]byte
}

// Signature is a verified signature (signature.Signature): Object is "commit <sha>" or
// "tag <name>", Key "PGP key <fingerprint>" or "SSH key SHA256:<base64>".
type Signature = signature.Signature

var (
	// ErrUnsigned reports a commit or tag that carries no signature.
	ErrUnsigned = signature.ErrUnsigned
	// ErrUnknownKey reports a signature made by a key that is not trusted.
	ErrUnknownKey = errors.New("signed by a key that is not trusted")
	// ErrBadSignature reports a signature that does not verify against the key it names:
	// the object was altered after signing, or the signature is corrupt.
	ErrBadSignature = errors.New("signature does not verify")
	// ErrNoTag reports a Tag mode where the ref resolved to no annotated tag: a branch, a
	// commit, or a lightweight tag.
	ErrNoTag = errors.New("no annotated tag to verify")
	// ErrNoKeys reports trusted keys that are missing or cannot be read.
	ErrNoKeys = signature.ErrNoKeys
)

// VerificationError reports a fetched revision whose signatures could not be verified
// (signature.Error); it wraps one of ErrUnsigned, ErrUnknownKey, ErrBadSignature, ErrNoTag
// or ErrNoKeys. It is terminal (IsTerminal).
type VerificationError = signature.Error

// verify checks the signatures v asks for on target t, which transfer left in the cache,
// and returns them. It reads the objects only: nothing is exported before it succeeds.
func (c *cache) verify(t target, ref Ref, v *Verification) ([]Signature, error) {
	if v == nil {
		return nil, nil
	}
	mode := v.Mode
	if mode == "" {
		mode = VerifyHEAD
	}
	sigs, err := c.verifyMode(t, ref, mode, v.Keys)
	if err != nil && verdict(err) {
		return nil, &VerificationError{Check: fmt.Sprintf("signature verification (mode %s)", mode), Err: err}
	}
	return sigs, err
}

// errUnknownMode reports a mode other than HEAD, Tag or TagAndHEAD.
var errUnknownMode = errors.New("unknown mode: want HEAD, Tag or TagAndHEAD")

// verdict reports whether err is a verification's answer about the revision or the keys,
// rather than a failure to read the cache (worth a retry).
func verdict(err error) bool {
	for _, e := range []error{ErrUnsigned, ErrUnknownKey, ErrBadSignature, ErrNoTag, ErrNoKeys, errUnknownMode} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func (c *cache) verifyMode(t target, ref Ref, mode VerifyMode, keys map[string][]byte) ([]Signature, error) {
	if mode != VerifyHEAD && mode != VerifyTag && mode != VerifyTagAndHEAD {
		return nil, fmt.Errorf("%q: %w", mode, errUnknownMode)
	}
	trusted, err := parseKeys(keys)
	if err != nil {
		return nil, err
	}
	var sigs []Signature
	if mode != VerifyHEAD {
		s, err := c.verifyTag(t, ref, mode, trusted)
		if err != nil {
			return nil, err
		}
		sigs = append(sigs, s)
	}
	if mode != VerifyTag {
		commit, err := c.commitObject(t.hash)
		if err != nil {
			return nil, err
		}
		s, err := trusted.check(signed{
			object: "commit " + t.hash.String(), signature: commit.PGPSignature,
			payload: commit.EncodeWithoutSignature, pgp: commit.Verify,
			sign: "sign it with a trusted key (git commit -S)",
		})
		if err != nil {
			return nil, err
		}
		sigs = append(sigs, s)
	}
	return sigs, nil
}

// verifyTag checks the annotated tag t resolved to, and that it names t's commit.
func (c *cache) verifyTag(t target, ref Ref, mode VerifyMode, trusted trustedKeys) (Signature, error) {
	if ref.Commit != "" || !t.refName.IsTag() {
		return Signature{}, fmt.Errorf("%s: %w: mode %s needs a tag or semver ref (spec.source.git.ref.tag or .semver), or use mode HEAD",
			ref, ErrNoTag, mode)
	}
	if t.tag.IsZero() {
		return Signature{}, fmt.Errorf("tag %s is a lightweight tag, which carries no signature: %w: tag with an annotated, signed tag (git tag -s), or use mode HEAD",
			t.name, ErrNoTag)
	}
	r, err := openRepository(filepath.Join(c.dir, "shallow.git"), nil)
	if err != nil {
		return Signature{}, err
	}
	tag, err := r.TagObject(t.tag)
	if err != nil {
		return Signature{}, fmt.Errorf("tag %s: object %s not in the cache after fetch: %w", t.name, t.tag, err)
	}
	if tag.TargetType != plumbing.CommitObject || tag.Target != t.hash {
		return Signature{}, fmt.Errorf("tag %s names %s %s, not the fetched commit %s (moved during the fetch?)",
			t.name, tag.TargetType, tag.Target, t.hash)
	}
	if short := t.refName.Short(); tag.Name != short {
		// A signed tag object of another release placed under this name (a rollback): its
		// signature covers the name it was signed as.
		return Signature{}, fmt.Errorf("tag %s: %w: the tag object under this name was signed as tag %q: tag the release anew (git tag -s %s)",
			short, ErrBadSignature, tag.Name, short)
	}
	return trusted.check(signed{
		object: "tag " + t.name, signature: tag.PGPSignature,
		payload: tag.EncodeWithoutSignature, pgp: tag.Verify,
		sign: "sign it with a trusted key (git tag -s)",
	})
}

// tagOf returns the annotated tag object the local ref name points to, or the zero hash
// for a branch, a lightweight tag or a missing ref.
func tagOf(r *gogit.Repository, name plumbing.ReferenceName) plumbing.Hash {
	if !name.IsTag() {
		return plumbing.ZeroHash
	}
	ref, err := r.Reference(name, true)
	if err != nil {
		return plumbing.ZeroHash
	}
	if _, err := r.TagObject(ref.Hash()); err != nil {
		return plumbing.ZeroHash
	}
	return ref.Hash()
}

// signatureKind tells a PGP signature from an SSH one by its armor, as git does.
func signatureKind(sig string) string {
	switch {
	case strings.HasPrefix(sig, "-----BEGIN PGP SIGNATURE-----"):
		return "PGP"
	case strings.HasPrefix(sig, "-----BEGIN SSH SIGNATURE-----"):
		return "SSH"
	}
	return ""
}

// haveTag reports whether the annotated tag t resolved to, if any, is stored in r: a commit
// cached through a branch still needs its tag object fetched for a Tag mode.
func haveTag(r *gogit.Repository, t target) bool {
	if t.tag.IsZero() {
		return true
	}
	_, err := r.TagObject(t.tag)
	return err == nil
}
