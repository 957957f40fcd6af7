package oci

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/converge-dev/converge/e2e/registry"
)

// cosignPayload is the simple-signing payload cosign sign writes for manifest d of ref.
func cosignPayload(ref string, d digest.Digest) []byte {
	return []byte(`{"critical":{"identity":{"docker-reference":"` + ref + `"},"image":{"docker-manifest-digest":"` +
		d.String() + `"},"type":"cosign container image signature"},"optional":null}`)
}

// signPayload signs payload with key as cosign does: ECDSA and RSA over its SHA-256,
// ed25519 over the payload.
func signPayload(t *testing.T, key crypto.Signer, payload []byte) string {
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

// pubPEM is key's public key as cosign generate-key-pair writes cosign.pub.
func pubPEM(t *testing.T, key crypto.Signer) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

func ecKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// pushSignature pushes, as cosign lays it out, a signature manifest tagged
// sha256-<hex>.sig of manifest target whose one layer is payload with signature sig.
func pushSignature(t *testing.T, reg *registry.Registry, repo string, target digest.Digest, payload []byte, sig string) digest.Digest {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rp := reg.Repository(t, repo)
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

// sign signs manifest target of repo with key, as cosign sign --key does.
func sign(t *testing.T, reg *registry.Registry, repo string, target digest.Digest, key crypto.Signer) digest.Digest {
	t.Helper()
	p := cosignPayload(reg.Host+"/"+repo, target)
	return pushSignature(t, reg, repo, target, p, signPayload(t, key, p))
}

// TestCosignVerify: an artifact signed as cosign sign --key lays it out is extracted with
// its signer reported; every other case is a distinct terminal error naming the artifact,
// returned before the layer is downloaded.
func TestCosignVerify(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	trusted, other := ecKey(t), ecKey(t)
	trustedKeys := map[string][]byte{"cosign.pub": pubPEM(t, trusted)}
	files := map[string]string{"deploy.yaml": "kind: ConfigMap\n"}
	signed := reg.PushFiles(t, "team/app", "signed", files)
	sign(t, reg, "team/app", signed, trusted)
	reg.PushFiles(t, "team/app", "unsigned", map[string]string{"deploy.yaml": "v: unsigned\n"})
	foreign := reg.PushFiles(t, "team/app", "foreign", map[string]string{"deploy.yaml": "v: foreign\n"})
	sign(t, reg, "team/app", foreign, other)
	replayed := reg.PushFiles(t, "team/app", "replayed", map[string]string{"deploy.yaml": "v: evil\n"})
	p := cosignPayload(reg.Host+"/team/app", signed)
	pushSignature(t, reg, "team/app", replayed, p, signPayload(t, trusted, p))
	edited := reg.PushFiles(t, "team/app", "edited", map[string]string{"deploy.yaml": "v: edited\n"})
	pushSignature(t, reg, "team/app", edited, cosignPayload(reg.Host+"/team/app", edited), signPayload(t, trusted, p))
	altered := reg.PushFiles(t, "team/app", "altered", map[string]string{"deploy.yaml": "v: altered\n"})
	payloadDigest := sign(t, reg, "team/app", altered, trusted)
	b, err := os.ReadFile(reg.BlobPath(payloadDigest))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(reg.BlobPath(payloadDigest), bytes.Replace(b, []byte(`"optional":null`), []byte(`"optional":true`), 1), 0o644); err != nil {
		t.Fatal(err)
	}

	f := NewFetcher(t.TempDir())
	fetch := func(tag string, keys map[string][]byte) (*Result, error) {
		return f.Fetch(context.Background(), Artifact{URL: reg.URL("team/app"), Ref: Ref{Tag: tag}, Insecure: true,
			Verify: &Verification{Provider: CosignProvider, Keys: keys}}, localOptions())
	}
	res, err := fetch("signed", trustedKeys)
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, res.Dir, "deploy.yaml"); got != files["deploy.yaml"] {
		t.Fatalf("deploy.yaml = %q", got)
	}
	if res.Signature == nil || !strings.HasPrefix(res.Signature.Key, "ECDSA P-256 key SHA256:") || res.Signature.Source != "cosign.pub" || res.Signature.Digest != signed.String() {
		t.Fatalf("signature = %+v", res.Signature)
	}

	tests := []struct {
		name, tag string
		keys      map[string][]byte
		want      error
		says      string
	}{
		{"unsigned", "unsigned", trustedKeys, ErrUnsigned, ".sig"},
		{"unknown key", "foreign", trustedKeys, ErrUnknownKey, "cosign.pub"},
		{"replayed from another artifact", "replayed", trustedKeys, ErrWrongSubject, signed.String()},
		{"payload edited after signing", "edited", trustedKeys, ErrUnknownKey, "altered after signing"},
		{"payload altered in the registry", "altered", trustedKeys, ErrBadSignature, "do not match its digest"},
		{"bad key Secret", "signed", map[string][]byte{"cosign.pub": []byte("not a key")}, ErrNoKeys, `key "cosign.pub"`},
		{"private key given", "signed", map[string][]byte{"cosign.key": pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED SIGSTORE PRIVATE KEY", Bytes: []byte("x")})}, ErrNoKeys, "cosign.key"},
		{"no key", "signed", map[string][]byte{}, ErrNoKeys, "no key"},
		// The cached extraction of "signed" is not served to a fetch with other keys.
		{"cached artifact, other key", "signed", map[string][]byte{"other.pub": pubPEM(t, other)}, ErrUnknownKey, "other.pub"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := f.Stats().Downloads
			_, err := fetch(tc.tag, tc.keys)
			var ve *VerificationError
			if !errors.Is(err, tc.want) || !errors.As(err, &ve) || !IsTerminal(err) {
				t.Fatalf("err = %v, want a terminal VerificationError wrapping %v", err, tc.want)
			}
			for _, s := range []string{reg.URL("team/app") + ":" + tc.tag, tc.says} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not name %q", err, s)
				}
			}
			if d := f.Stats().Downloads - before; d != 0 {
				t.Errorf("%d layers downloaded before the verification failed", d)
			}
		})
	}
}

// TestCosignKeyTypes: RSA and ed25519 keys verify as cosign signs with them.
func TestCosignKeyTypes(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	_, ek, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	f := NewFetcher(t.TempDir())
	for name, key := range map[string]crypto.Signer{"RSA 2048": rk, "ed25519": ek} {
		d := reg.PushFiles(t, "team/app", strings.ReplaceAll(name, " ", ""), map[string]string{"a.yaml": name})
		sign(t, reg, "team/app", d, key)
		res, err := f.Fetch(context.Background(), Artifact{URL: reg.URL("team/app"), Ref: Ref{Digest: d.String()}, Insecure: true,
			Verify: &Verification{Keys: map[string][]byte{"k.pub": pubPEM(t, key)}}}, localOptions())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !strings.HasPrefix(res.Signature.Key, name+" key SHA256:") {
			t.Errorf("%s: signature key %q", name, res.Signature.Key)
		}
	}
}
