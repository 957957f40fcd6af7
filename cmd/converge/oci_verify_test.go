package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/converge-dev/converge/e2e/registry"
)

// TestBuildOCIVerifyKey: `converge build oci://… --verify-key cosign.pub` renders an
// artifact signed with the key in cosign's layout, saying on stderr which key signed it,
// and refuses, exit 2 and nothing printed, an unsigned one and one signed by another key.
func TestBuildOCIVerifyKey(t *testing.T) {
	reg, flags := ociRegistry(t)
	keyFile := func(name string) (*ecdsa.PrivateKey, string) {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, registry.CosignPublicKey(t, k), 0o600); err != nil {
			t.Fatal(err)
		}
		return k, p
	}
	signer, signerPub := keyFile("cosign.pub")
	other, otherPub := keyFile("other.pub")
	cm := strings.Replace(cmA, "VERSION", "1", 1)
	signed := reg.PushFiles(t, "apps", "signed", map[string]string{"deploy/a.yaml": cm})
	reg.CosignSign(t, "apps", signed, signer)
	reg.PushFiles(t, "apps", "unsigned", map[string]string{"deploy/a.yaml": cm + "# unsigned\n"})
	foreign := reg.PushFiles(t, "apps", "foreign", map[string]string{"deploy/a.yaml": cm + "# foreign\n"})
	reg.CosignSign(t, "apps", foreign, other)
	build := func(tag string, extra ...string) (string, string, int) {
		return runOffline(append(append([]string{"build", reg.URL("apps") + ":" + tag, "--path", "deploy"}, flags...), extra...)...)
	}

	out, errOut, code := build("signed", "--verify-key", otherPub, "--verify-key", signerPub)
	if code != 0 || !strings.Contains(out, "version: \"1\"") {
		t.Fatalf("signed: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if want := "verified: artifact " + signed.String() + " signed by ECDSA P-256 key SHA256:"; !strings.Contains(errOut, want) || !strings.Contains(errOut, "("+signerPub+")") {
		t.Errorf("stderr %q, want %q… naming the key file", errOut, want)
	}
	for tag, want := range map[string]string{"unsigned": "not signed", "foreign": "no signature verifies with a trusted key"} {
		out, errOut, code = build(tag, "--verify-key", signerPub)
		if code != 2 || out != "" || !strings.Contains(errOut, want) || !strings.Contains(errOut, reg.URL("apps")+":"+tag) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 2 and %q", tag, code, out, errOut, want)
		}
	}
	_, errOut, code = build("signed", "--verify-key", signerPub, "--verify-mode", "Tag")
	if code != 2 || !strings.Contains(errOut, "--verify-mode is for a git source") {
		t.Errorf("--verify-mode with oci://: exit %d, stderr %q", code, errOut)
	}
}
