package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/converge-dev/converge/e2e/binary"
	"github.com/converge-dev/converge/e2e/sopsfixture"
)

// TestBinaryDecryptsWithItsProgram: the built converge decrypts a SOPS-encrypted Secret with
// the converge-decrypt built beside it, as make build and the image place them; copied alone
// into another folder, it refuses the encrypted Secret naming the program to install (and
// still builds it masked without a key, which needs no program).
func TestBinaryDecryptsWithItsProgram(t *testing.T) {
	key := sopsfixture.NewKey(t)
	const plaintext = "e2e-decrypt-7c1f-plaintext"
	dir, src := t.TempDir(), t.TempDir()
	keyFile := filepath.Join(dir, "age.agekey")
	secret := "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\n  namespace: app\nstringData:\n  password: " + plaintext + "\n"
	if err := os.WriteFile(keyFile, []byte(key.Identity+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "secret.enc.yaml"), sopsfixture.Encrypt(t, []byte(secret), sopsfixture.DefaultRegex, key.Recipient), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(bin string, args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "CONVERGE_DECRYPT_PROGRAM=") // where the binary is, not the test's
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run(binary.Converge(t), "build", src, "--decryption-key-file", keyFile, "--show-secrets")
	if err != nil || !strings.Contains(out, "password: "+plaintext) {
		t.Fatalf("converge build with its program: %v\n%s", err, out)
	}

	alone := filepath.Join(t.TempDir(), "converge")
	data, err := os.ReadFile(binary.Converge(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(alone, data, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err = run(alone, "build", src, "--decryption-key-file", keyFile)
	want := "decrypting Secret app/db (secret.enc.yaml:1): SOPS decryption needs converge-decrypt next to converge: " +
		"make build builds both, the image ships both (" + filepath.Join(filepath.Dir(alone), "converge-decrypt") + " not found)"
	if err == nil || !strings.Contains(out, want) || strings.Contains(out, plaintext) {
		t.Errorf("converge alone: %v, want an error saying\n%s\ngot:\n%s", err, want, out)
	}
	if out, err := run(alone, "build", src); err != nil || !strings.Contains(out, "**SOPS**") {
		t.Errorf("converge alone, no key: %v, want the Secret masked:\n%s", err, out)
	}
}
