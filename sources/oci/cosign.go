package oci

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/converge-dev/converge/sources/signature"
)

// Cosign's classic signature format (cosign sign --key): an image manifest tagged
// "sha256-<hex>.sig" in the artifact's repository, whose layers are simple-signing JSON
// payloads, each with its base64 signature in an annotation.
const (
	// CosignProvider is the only Verification.Provider.
	CosignProvider = "cosign"
	// CosignPayloadMediaType is the media type of a signature layer.
	CosignPayloadMediaType = "application/vnd.dev.cosign.simplesigning.v1+json"
	// CosignSignatureAnnotation holds the base64 signature of a layer's payload.
	CosignSignatureAnnotation = "dev.cosignproject.cosign/signature"
	// CosignSignatureType is the critical.type of a container image signature payload.
	CosignSignatureType = "cosign container image signature"
	// MaxCosignPayloadSize bounds one simple-signing payload read into memory.
	MaxCosignPayloadSize = 64 << 10
	// maxCosignSignatures bounds the signature layers tried.
	maxCosignSignatures = 64
)

// Verification asks Fetch to check the artifact's signature before anything of it is read
// or a cached extraction returned.
type Verification struct {
	// Provider is CosignProvider (empty means it).
	Provider string
	// Keys are the trusted public keys by name (the data keys of a Secret): each value a
	// PEM public key as cosign generate-key-pair writes it (cosign.pub): ECDSA, RSA or
	// ed25519.
	Keys map[string][]byte
}

// Signature is a verified signature (signature.Signature): Object is "artifact
// sha256:<hex>", the signed manifest digest.
type Signature = signature.Signature

var (
	// ErrUnsigned reports an artifact with no cosign signature (no sha256-<hex>.sig tag, or
	// no signature layer in it).
	ErrUnsigned = signature.ErrUnsigned
	// ErrUnknownKey reports signatures none of which verifies with a trusted key: made by
	// another key, or over a payload altered after signing (the format names no key).
	ErrUnknownKey = errors.New("no signature verifies with a trusted key")
	// ErrWrongSubject reports a signature by a trusted key over another artifact's digest
	// (copied from another artifact), or over something else than a container image.
	ErrWrongSubject = errors.New("signature by a trusted key is for another artifact")
	// ErrBadSignature reports a signature layer whose payload does not match its digest or
	// does not parse, or whose signature is not base64: altered in the registry.
	ErrBadSignature = errors.New("malformed or altered signature")
	// ErrNoKeys reports trusted keys that are missing or cannot be read.
	ErrNoKeys = signature.ErrNoKeys
)

// VerificationError reports an artifact whose signature could not be verified
// (signature.Error); it wraps one of ErrUnsigned, ErrUnknownKey, ErrWrongSubject,
// ErrBadSignature or ErrNoKeys. It is terminal (IsTerminal).
type VerificationError = signature.Error

// cosignCheck names the check in a VerificationError.
const cosignCheck = "cosign signature verification"

// trustedKey is one parsed public key.
type trustedKey struct {
	name string // the Verification.Keys entry
	id   string // "ECDSA P-256 key SHA256:<hex>"
	key  crypto.PublicKey
}

// ParseCosignKeys reads every entry of keys as a PEM public key: an entry that is not one
// is an error naming it, not a key silently left out.
func ParseCosignKeys(keys map[string][]byte) error {
	_, err := parseCosignKeys(keys)
	return err
}

func parseCosignKeys(keys map[string][]byte) ([]trustedKey, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: the verification Secret holds no key; add a cosign public key (cosign.pub)", ErrNoKeys)
	}
	var out []trustedKey
	for _, name := range slices.Sorted(maps.Keys(keys)) {
		rest := keys[name]
		n := 0
		for {
			var b *pem.Block
			b, rest = pem.Decode(rest)
			if b == nil {
				break
			}
			k, err := parsePublicKey(b)
			if err != nil {
				return nil, fmt.Errorf("key %q: %v; want a PEM public key as cosign generate-key-pair writes (cosign.pub): %w", name, err, ErrNoKeys)
			}
			out = append(out, trustedKey{name: name, id: keyID(k, b.Bytes), key: k})
			n++
		}
		if n == 0 || len(bytes.TrimSpace(rest)) != 0 {
			return nil, fmt.Errorf("key %q: not a PEM public key block; want a PEM public key as cosign generate-key-pair writes (cosign.pub): %w", name, ErrNoKeys)
		}
	}
	return out, nil
}

func parsePublicKey(b *pem.Block) (crypto.PublicKey, error) {
	if b.Type != "PUBLIC KEY" {
		return nil, fmt.Errorf("PEM block %q", b.Type)
	}
	k, err := x509.ParsePKIXPublicKey(b.Bytes)
	if err != nil {
		return nil, err
	}
	switch k := k.(type) {
	case *ecdsa.PublicKey, *rsa.PublicKey, ed25519.PublicKey:
		return k, nil
	}
	return nil, fmt.Errorf("unsupported key type %T", k)
}

func keyID(k crypto.PublicKey, der []byte) string {
	h := sha256.Sum256(der)
	kind := "ed25519"
	switch k := k.(type) {
	case *ecdsa.PublicKey:
		kind = "ECDSA " + k.Curve.Params().Name
	case *rsa.PublicKey:
		kind = fmt.Sprintf("RSA %d", k.N.BitLen())
	}
	return kind + " key SHA256:" + hex.EncodeToString(h[:])
}

// verifies reports whether sig is k's signature of payload, as cosign signs: ECDSA
// (ASN.1) and RSA PKCS#1 v1.5 over its SHA-256, ed25519 over the payload itself.
func (k trustedKey) verifies(payload, sig []byte) bool {
	h := sha256.Sum256(payload)
	switch pk := k.key.(type) {
	case *ecdsa.PublicKey:
		return ecdsa.VerifyASN1(pk, h[:], sig)
	case *rsa.PublicKey:
		return rsa.VerifyPKCS1v15(pk, crypto.SHA256, h[:], sig) == nil
	case ed25519.PublicKey:
		return ed25519.Verify(pk, payload, sig)
	}
	return false
}

// CosignSignatureTag is the tag of the signature manifest of manifest digest d.
func CosignSignatureTag(d digest.Digest) string {
	return string(d.Algorithm()) + "-" + d.Encoded() + ".sig"
}

// simpleSigning is the part of a simple-signing payload checked.
type simpleSigning struct {
	Critical struct {
		Image struct {
			DockerManifestDigest string `json:"docker-manifest-digest"`
		} `json:"image"`
		Type string `json:"type"`
	} `json:"critical"`
}

// verifyCosign checks that a signature of s's manifest digest by one of v's keys is in the
// registry, and returns it. Every read goes through s.Repository (credentials, dial guard,
// byte budget); nothing is cached, so a cached artifact is verified again on every fetch,
// against the keys of that fetch.
func verifyCosign(ctx context.Context, s Subject, v *Verification) (*Signature, error) {
	if v.Provider != "" && v.Provider != CosignProvider {
		return nil, &VerificationError{Check: cosignCheck, Err: fmt.Errorf("%w: provider %q, want %q", ErrNoKeys, v.Provider, CosignProvider)}
	}
	keys, err := parseCosignKeys(v.Keys)
	if err != nil {
		return nil, &VerificationError{Check: cosignCheck, Err: err}
	}
	layers, err := signatureLayers(ctx, s)
	if err != nil {
		return nil, err
	}
	var best error
	for _, l := range layers {
		sig, err := checkLayer(ctx, s.Repository, s.Manifest.Digest, l, keys)
		if err == nil {
			return sig, nil
		}
		if !verdict(err) {
			return nil, err
		}
		if best == nil || rank(err) > rank(best) {
			best = err
		}
	}
	if best == nil {
		best = fmt.Errorf("%w: tag %s holds no %s layer; sign it with cosign sign --key", ErrUnsigned, CosignSignatureTag(s.Manifest.Digest), CosignPayloadMediaType)
	}
	return nil, &VerificationError{Check: cosignCheck, Err: best}
}

// rank orders the failures of signature layers: the most telling one is reported.
func rank(err error) int {
	switch {
	case errors.Is(err, ErrWrongSubject):
		return 3
	case errors.Is(err, ErrBadSignature):
		return 2
	}
	return 1
}

func verdict(err error) bool {
	for _, e := range []error{ErrUnsigned, ErrUnknownKey, ErrWrongSubject, ErrBadSignature, ErrNoKeys} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// signatureLayers reads the signature manifest of s and returns its signature layers.
func signatureLayers(ctx context.Context, s Subject) ([]ocispec.Descriptor, error) {
	tag := CosignSignatureTag(s.Manifest.Digest)
	desc, err := s.Repository.Resolve(ctx, tag)
	if errors.Is(err, errdef.ErrNotFound) {
		return nil, &VerificationError{Check: cosignCheck, Err: fmt.Errorf("%w: no cosign signature (tag %s) in the repository; sign the artifact with cosign sign --key "+
			"(keyless signatures and the sigstore bundle format are not supported)", ErrUnsigned, tag)}
	}
	if err != nil {
		return nil, classify(s.Artifact, "resolve signature "+tag, err)
	}
	m, err := fetchManifest(ctx, s.Repository, s.Artifact, desc)
	if err != nil {
		if errors.Is(err, ErrDigest) || errors.Is(err, ErrInvalid) {
			return nil, &VerificationError{Check: cosignCheck, Err: fmt.Errorf("%w: signature manifest %s: %v", ErrBadSignature, tag, err)}
		}
		return nil, fmt.Errorf("signature manifest %s: %w", tag, err)
	}
	var out []ocispec.Descriptor
	for _, l := range m.Layers {
		if l.MediaType == CosignPayloadMediaType && l.Annotations[CosignSignatureAnnotation] != "" && len(out) < maxCosignSignatures {
			out = append(out, l)
		}
	}
	return out, nil
}

// checkLayer reads the payload of signature layer l and checks its signature with keys,
// then that it signs manifest digest d.
func checkLayer(ctx context.Context, repo *remote.Repository, d digest.Digest, l ocispec.Descriptor, keys []trustedKey) (*Signature, error) {
	sig, err := base64.StdEncoding.DecodeString(l.Annotations[CosignSignatureAnnotation])
	if err != nil {
		return nil, fmt.Errorf("%w: layer %s: signature annotation is not base64", ErrBadSignature, l.Digest)
	}
	if l.Size > MaxCosignPayloadSize || l.Size < 0 {
		return nil, fmt.Errorf("%w: layer %s: payload of %d bytes, over %d", ErrBadSignature, l.Digest, l.Size, MaxCosignPayloadSize)
	}
	if l.Digest.Validate() != nil {
		return nil, fmt.Errorf("%w: layer digest %q", ErrBadSignature, l.Digest)
	}
	rc, err := repo.Blobs().Fetch(ctx, l)
	if err != nil {
		return nil, fmt.Errorf("signature payload %s: %w", l.Digest, err)
	}
	defer rc.Close()
	payload, err := io.ReadAll(io.LimitReader(rc, l.Size+1))
	if err != nil {
		return nil, fmt.Errorf("signature payload %s: %w", l.Digest, err)
	}
	if int64(len(payload)) != l.Size || digest.FromBytes(payload) != l.Digest {
		return nil, fmt.Errorf("%w: payload %s: its bytes do not match its digest (altered in the registry; sign the artifact again)", ErrBadSignature, l.Digest)
	}
	var by *trustedKey
	for i := range keys {
		if keys[i].verifies(payload, sig) {
			by = &keys[i]
			break
		}
	}
	if by == nil {
		return nil, fmt.Errorf("%w (%s): signed by another key, or the payload was altered after signing; sign with a trusted key (cosign sign --key) or add its public key to the Secret",
			ErrUnknownKey, strings.Join(keyNames(keys), ", "))
	}
	var p simpleSigning
	if err := json.Unmarshal(payload, &p); err != nil {
		return nil, fmt.Errorf("%w: payload %s signed by %s does not parse: %v", ErrBadSignature, l.Digest, by.id, err)
	}
	if p.Critical.Type != CosignSignatureType {
		return nil, fmt.Errorf("%w: payload signed by %s is of type %q, not %q", ErrWrongSubject, by.id, p.Critical.Type, CosignSignatureType)
	}
	if p.Critical.Image.DockerManifestDigest != d.String() {
		return nil, fmt.Errorf("%w: signature by %s (%s) is for %s, not %s (copied from another artifact: sign this one)",
			ErrWrongSubject, by.id, by.name, p.Critical.Image.DockerManifestDigest, d)
	}
	return &Signature{Object: "artifact " + d.String(), Key: by.id, Source: by.name}, nil
}

func keyNames(keys []trustedKey) []string {
	var names []string
	for _, k := range keys {
		if !slices.Contains(names, k.name) {
			names = append(names, k.name)
		}
	}
	return names
}
