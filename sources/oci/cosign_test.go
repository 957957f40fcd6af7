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
	"encoding/pem"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/converge-dev/converge/e2e/registry"
)

func ecKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestCosignVerify: an artifact signed as cosign sign --key lays it out is extracted with
// its signer reported; every other case is a distinct terminal error naming the artifact,
// returned before the layer is downloaded.
func TestCosignVerify(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	trusted, other := ecKey(t), ecKey(t)
	trustedKeys := map[string][]byte{"cosign.pub": registry.CosignPublicKey(t, trusted)}
	files := map[string]string{"deploy.yaml": "kind: ConfigMap\n"}
	signed := reg.PushFiles(t, "team/app", "signed", files)
	reg.CosignSign(t, "team/app", signed, trusted)
	reg.PushFiles(t, "team/app", "unsigned", map[string]string{"deploy.yaml": "v: unsigned\n"})
	foreign := reg.PushFiles(t, "team/app", "foreign", map[string]string{"deploy.yaml": "v: foreign\n"})
	reg.CosignSign(t, "team/app", foreign, other)
	replayed := reg.PushFiles(t, "team/app", "replayed", map[string]string{"deploy.yaml": "v: evil\n"})
	p := registry.CosignPayload(reg.Host+"/team/app", signed)
	reg.PushCosignSignature(t, "team/app", replayed, p, registry.CosignSignPayload(t, trusted, p))
	edited := reg.PushFiles(t, "team/app", "edited", map[string]string{"deploy.yaml": "v: edited\n"})
	reg.PushCosignSignature(t, "team/app", edited, registry.CosignPayload(reg.Host+"/team/app", edited), registry.CosignSignPayload(t, trusted, p))
	altered := reg.PushFiles(t, "team/app", "altered", map[string]string{"deploy.yaml": "v: altered\n"})
	payloadDigest := reg.CosignSign(t, "team/app", altered, trusted)
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
	if res.Signature == nil || !strings.HasPrefix(res.Signature.Key, "ECDSA P-256 key SHA256:") || res.Signature.Source != "cosign.pub" || res.Signature.Object != "artifact "+signed.String() {
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
		{"cached artifact, other key", "signed", map[string][]byte{"other.pub": registry.CosignPublicKey(t, other)}, ErrUnknownKey, "other.pub"},
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
		reg.CosignSign(t, "team/app", d, key)
		res, err := f.Fetch(context.Background(), Artifact{URL: reg.URL("team/app"), Ref: Ref{Digest: d.String()}, Insecure: true,
			Verify: &Verification{Keys: map[string][]byte{"k.pub": registry.CosignPublicKey(t, key)}}}, localOptions())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !strings.HasPrefix(res.Signature.Key, name+" key SHA256:") {
			t.Errorf("%s: signature key %q", name, res.Signature.Key)
		}
	}
}

// TestCosignVerifyCachedCost: with verification, a fetch of a cached artifact costs the
// manifest's HEAD plus the signature's lookup, manifest and payload, and no layer; a
// refused one stops before the artifact's manifest is read.
func TestCosignVerifyCachedCost(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	key := ecKey(t)
	d := reg.PushFiles(t, "team/app", "v1", map[string]string{"a.yaml": "a: 1\n"})
	reg.CosignSign(t, "team/app", d, key)
	c := countRequests(t, reg)
	a := Artifact{URL: "oci://" + strings.TrimPrefix(c.srv.URL, "http://") + "/team/app", Ref: Ref{Tag: "v1"}, Insecure: true,
		Verify: &Verification{Keys: map[string][]byte{"cosign.pub": registry.CosignPublicKey(t, key)}}}
	f := NewFetcher(t.TempDir())
	if _, err := f.Fetch(context.Background(), a, localOptions()); err != nil {
		t.Fatal(err)
	}
	c.take()
	if _, err := f.Fetch(context.Background(), a, localOptions()); err != nil {
		t.Fatal(err)
	}
	sig := registry.CosignSignatureTag(d)
	want := []string{"HEAD /v2/team/app/manifests/v1", "HEAD /v2/team/app/manifests/" + sig}
	got := c.take()
	if len(got) != 4 || got[0] != want[0] || got[1] != want[1] || !strings.HasPrefix(got[2], "GET /v2/team/app/manifests/sha256:") ||
		!strings.HasPrefix(got[3], "GET /v2/team/app/blobs/sha256:") {
		t.Errorf("cached verified fetch sent %q, want %q, the signature manifest and its payload", got, want)
	}
	reg.PushFiles(t, "team/app", "v2", map[string]string{"a.yaml": "a: 2\n"})
	a.Ref.Tag = "v2"
	if _, err := f.Fetch(context.Background(), a, localOptions()); !errors.Is(err, ErrUnsigned) {
		t.Fatalf("err = %v, want ErrUnsigned", err)
	}
	for _, r := range c.take() {
		if strings.HasPrefix(r, "GET ") {
			t.Errorf("an unsigned artifact was read: %s", r)
		}
	}
}
