package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/converge-dev/converge/cmd/converge/internal/synctest"
	"github.com/converge-dev/converge/e2e/gitserver"
)

// sshKeyFile makes an ed25519 key with ssh-keygen; it returns the private key's path, and
// the public key's.
func sshKeyFile(t *testing.T) (private, public string) {
	t.Helper()
	private = filepath.Join(t.TempDir(), "id_ed25519")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", private).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	return private, private + ".pub"
}

// TestBuildVerifyKey: `converge build --git-url … --verify-key FILE` renders a commit
// signed with the key (SSH, gpg.format=ssh), saying on stderr which key signed it, and refuses, exit 2 and nothing printed, one
// signed by another key, as the daemon's spec.source.git.verify does; --verify-key without
// --git-url, and --verify-mode without --verify-key, are refused.
func TestBuildVerifyKey(t *testing.T) {
	srv, err := gitserver.Start(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	signer, signerPub := sshKeyFile(t)
	_, otherPub := sshKeyFile(t)
	srv.SigningKey = signer
	rev := synctest.Publish(t, srv, t.TempDir(), "x", map[string]string{"cm.yaml": synctest.ConfigMapB})
	sha := strings.TrimPrefix(rev, "main@sha1:")
	args := []string{"build", "--git-url", srv.RepoURL("app"), "--ref-branch", "main", "--git-cache-dir", t.TempDir()}

	out, errOut, code := runOffline(append(args, "--verify-key", otherPub, "--verify-key", signerPub)...)
	if code != 0 || !strings.Contains(out, "name: b") {
		t.Fatalf("signed by a given key: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if want := "verified: commit " + sha + " signed by SSH key SHA256:"; !strings.HasPrefix(errOut, want) || !strings.Contains(errOut, "("+signerPub+")") {
		t.Errorf("stderr %q, want %q… naming the key file", errOut, want)
	}
	out, errOut, code = runOffline(append(args, "--verify-key", otherPub)...)
	if want := "commit " + sha + " is signed by a key that is not trusted"; code != 2 || out != "" || !strings.Contains(errOut, want) {
		t.Errorf("signed by another key: exit %d, stdout %q, stderr %q; want exit 2 and %q", code, out, errOut, want)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cm.yaml"), []byte(synctest.ConfigMapB), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code = runOffline("build", dir, "--verify-key", signerPub)
	if code != 2 || !strings.Contains(errOut, "--verify-key verifies a fetched commit or OCI artifact: give --git-url or an oci:// reference") {
		t.Errorf("local folder: exit %d, stderr %q", code, errOut)
	}
	_, errOut, code = runOffline(append(args, "--verify-mode", "Tag")...)
	if code != 2 || !strings.Contains(errOut, "--verify-mode needs --verify-key") {
		t.Errorf("--verify-mode alone: exit %d, stderr %q", code, errOut)
	}
}
