package registry

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Cosign's classic signature layout (cosign sign --key).
const (
	CosignPayloadMediaType    = "application/vnd.dev.cosign.simplesigning.v1+json"
	CosignSignatureAnnotation = "dev.cosignproject.cosign/signature"
)

// CosignPayload is the simple-signing payload cosign sign writes for manifest d of
// repository ref ("host/repo").
func CosignPayload(ref string, d digest.Digest) []byte {
	return []byte(`{"critical":{"identity":{"docker-reference":"` + ref + `"},"image":{"docker-manifest-digest":"` +
		d.String() + `"},"type":"cosign container image signature"},"optional":null}`)
}

// CosignSignPayload signs payload with key as cosign does (ECDSA and RSA over its SHA-256,
// ed25519 over the payload) and returns the base64 signature.
func CosignSignPayload(t testing.TB, key crypto.Signer, payload []byte) string {
	t.Helper()
	var sig []byte
	var err error
	if _, ok := key.(ed25519.PrivateKey); ok {
		sig, err = key.Sign(rand.Reader, payload, crypto.Hash(0))
	} else {
		h := sha256.Sum256(payload)
		sig, err = key.Sign(rand.Reader, h[:], crypto.SHA256)
	}
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(sig)
}

// CosignPublicKey is key's public key as cosign generate-key-pair writes cosign.pub.
func CosignPublicKey(t testing.TB, key crypto.Signer) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// CosignSignatureTag is the tag cosign stores the signatures of manifest d under.
func CosignSignatureTag(d digest.Digest) string {
	return string(d.Algorithm()) + "-" + d.Encoded() + ".sig"
}

// PushCosignSignature pushes, as cosign lays it out, a signature manifest tagged
// sha256-<hex>.sig of manifest target whose one layer is payload with signature sig, and
// returns the payload layer's digest.
func (r *Registry) PushCosignSignature(t testing.TB, repo string, target digest.Digest, payload []byte, sig string) digest.Digest {
	t.Helper()
	ctx, cancel := pushContext()
	defer cancel()
	rp := r.Repository(t, repo)
	push := func(mediaType string, data []byte, ann map[string]string) ocispec.Descriptor {
		d := ocispec.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(data), Size: int64(len(data)), Annotations: ann}
		if err := rp.Push(ctx, d, bytes.NewReader(data)); err != nil && !strings.Contains(err.Error(), "exists") {
			t.Fatal(err)
		}
		return d
	}
	m := ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest,
		Config: push(ocispec.MediaTypeImageConfig, []byte(`{"architecture":"","os":"","config":{},"rootfs":{"type":"layers","diff_ids":[]}}`), nil),
		Layers: []ocispec.Descriptor{push(CosignPayloadMediaType, payload, map[string]string{CosignSignatureAnnotation: sig})}}
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	d := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromBytes(data), Size: int64(len(data))}
	if err := rp.PushReference(ctx, d, bytes.NewReader(data), CosignSignatureTag(target)); err != nil {
		t.Fatal(err)
	}
	return m.Layers[0].Digest
}

// CosignSign signs manifest target of repo with key, as cosign sign --key does, and
// returns the payload layer's digest.
func (r *Registry) CosignSign(t testing.TB, repo string, target digest.Digest, key crypto.Signer) digest.Digest {
	t.Helper()
	p := CosignPayload(r.Host+"/"+repo, target)
	return r.PushCosignSignature(t, repo, target, p, CosignSignPayload(t, key, p))
}
