package oci

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/converge-dev/converge/e2e/gotool"
	"github.com/converge-dev/converge/e2e/registry"
)

// cosignVersion is the cosign release the differential test signs with.
const cosignVersion = "v2.4.1"

// cosignBinary returns the real cosign binary: $CONVERGE_COSIGN_BIN, else the one built
// from the module proxy once (e2e/gotool: about 6 minutes cold, cached after).
func cosignBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CONVERGE_COSIGN_BIN"); p != "" {
		return p
	}
	return gotool.Binary(t, "cosign", "github.com/sigstore/cosign/v2/cmd/cosign", cosignVersion)
}

// TestCosignCLIDifferential: an artifact signed by the real `cosign sign --key` (key pair
// from `cosign generate-key-pair`, no transparency log) verifies with cosign.pub, and not
// with another key pair's public key.
func TestCosignCLIDifferential(t *testing.T) {
	bin := cosignBinary(t)
	reg := registry.Start(t, registry.Options{})
	dir := t.TempDir()
	run := func(sub string, args ...string) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Dir = filepath.Join(dir, sub)
		cmd.Env = append(os.Environ(), "COSIGN_PASSWORD=", "HOME="+dir, "TUF_ROOT="+filepath.Join(dir, "tuf"))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("cosign %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	for _, sub := range []string{"signer", "other"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			t.Fatal(err)
		}
		run(sub, "generate-key-pair")
	}
	d := reg.PushFiles(t, "team/app", "v1", map[string]string{"a.yaml": "a: 1\n"})
	run("signer", "sign", "--key", "cosign.key", "--tlog-upload=false", "--allow-insecure-registry", "--allow-http-registry", "-y",
		reg.Host+"/team/app@"+d.String())
	readKey := func(sub string) map[string][]byte {
		b, err := os.ReadFile(filepath.Join(dir, sub, "cosign.pub"))
		if err != nil {
			t.Fatal(err)
		}
		return map[string][]byte{"cosign.pub": b}
	}
	f := NewFetcher(t.TempDir())
	fetch := func(keys map[string][]byte) (*Result, error) {
		return f.Fetch(context.Background(), Artifact{URL: reg.URL("team/app"), Ref: Ref{Tag: "v1"}, Insecure: true,
			Verify: &Verification{Keys: keys}}, localOptions())
	}
	res, err := fetch(readKey("signer"))
	if err != nil {
		t.Fatalf("signed by cosign: %v", err)
	}
	if res.Signature == nil || !strings.HasPrefix(res.Signature.Key, "ECDSA P-256 key") {
		t.Errorf("signature = %+v", res.Signature)
	}
	if _, err := fetch(readKey("other")); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("other key: err = %v, want %v", err, ErrUnknownKey)
	}
}
