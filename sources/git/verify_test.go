package git

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	gogit "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/google/go-cmp/cmp"
)

// newPGPKey makes a PGP key pair and returns it with its armored public key block.
func newPGPKey(t *testing.T, name string) (*openpgp.Entity, []byte) {
	t.Helper()
	e, err := openpgp.NewEntity(name, "", name+"@example.com", nil)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w, err := armor.Encode(&buf, openpgp.PublicKeyType, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Serialize(w); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return e, buf.Bytes()
}

func fingerprint(e *openpgp.Entity) string {
	return strings.ToUpper(hex.EncodeToString(e.PrimaryKey.Fingerprint))
}

// newSSHSigningKey makes an ed25519 key with ssh-keygen and returns the private key's path
// (for git's user.signingkey), its authorized_keys line and its SHA256 fingerprint.
func newSSHSigningKey(t *testing.T) (path string, authorized []byte, fp string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "id_ed25519")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "signer@example.com", "-f", path).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	authorized, err := os.ReadFile(path + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ssh-keygen", "-l", "-f", path+".pub").Output()
	if err != nil {
		t.Fatal(err)
	}
	return path, authorized, strings.Fields(string(out))[1]
}

// commitPGP commits files on the current branch of r's work tree, signed with e through
// go-git (CommitOptions.SignKey), and returns the commit SHA.
func (r *testRepo) commitPGP(msg string, files map[string]string, e *openpgp.Entity) string {
	r.t.Helper()
	repo, err := gogit.PlainOpen(r.work)
	if err != nil {
		r.t.Fatal(err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		r.t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(r.work, name), []byte(content), 0o644); err != nil {
			r.t.Fatal(err)
		}
		if _, err := wt.Add(name); err != nil {
			r.t.Fatal(err)
		}
	}
	sig := &object.Signature{Name: "Test", Email: "test@example.com", When: time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)}
	h, err := wt.Commit(msg, &gogit.CommitOptions{Author: sig, Committer: sig, SignKey: e, AllowEmptyCommits: true})
	if err != nil {
		r.t.Fatal(err)
	}
	return h.String()
}

// sshGit runs git in r's work tree signing with the SSH key at keyPath (gpg.format=ssh).
func (r *testRepo) sshGit(keyPath string, args ...string) string {
	r.t.Helper()
	return r.git(append([]string{"-c", "gpg.format=ssh", "-c", "user.signingkey=" + keyPath}, args...)...)
}

// commitSSH commits files signed with the SSH key at keyPath and returns the commit SHA.
func (r *testRepo) commitSSH(msg string, files map[string]string, keyPath string) string {
	r.t.Helper()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(r.work, name), []byte(content), 0o644); err != nil {
			r.t.Fatal(err)
		}
	}
	r.git("add", "-A")
	r.sshGit(keyPath, "commit", "-q", "-S", "--allow-empty", "-m", msg)
	return r.git("rev-parse", "HEAD")
}

// forge writes a commit with the content of commit victim and the signature of commit
// donor, on branch, and returns its SHA: a commit re-written with another's signature.
func (r *testRepo) forge(branch, victim, donor string) string {
	r.t.Helper()
	repo, err := gogit.PlainOpen(r.work)
	if err != nil {
		r.t.Fatal(err)
	}
	v, err := repo.CommitObject(plumbing.NewHash(victim))
	if err != nil {
		r.t.Fatal(err)
	}
	d, err := repo.CommitObject(plumbing.NewHash(donor))
	if err != nil {
		r.t.Fatal(err)
	}
	forged := &object.Commit{Author: v.Author, Committer: v.Committer, Message: v.Message, TreeHash: v.TreeHash,
		ParentHashes: v.ParentHashes, PGPSignature: d.PGPSignature}
	o := repo.Storer.NewEncodedObject()
	if err := forged.Encode(o); err != nil {
		r.t.Fatal(err)
	}
	h, err := repo.Storer.SetEncodedObject(o)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := repo.Storer.SetReference(plumbing.NewHashReference(plumbing.NewBranchReferenceName(branch), h)); err != nil {
		r.t.Fatal(err)
	}
	return h.String()
}

// exported reports whether commit sha was written out anywhere under the fetcher's cache.
func exported(t *testing.T, f *Fetcher, sha string) bool {
	t.Helper()
	found := false
	err := filepath.WalkDir(f.CacheDir(), func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == sha {
			found = true
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// TestFetchVerifyCommit fetches commits signed with real PGP keys (go-git) and real SSH
// keys (git with gpg.format=ssh, ssh-keygen) from the git HTTP backend: a good signature is
// reported with its key and key entry; an unsigned commit, a signature by a key that is not
// trusted, a commit re-written under another commit's signature, or unusable keys fail
// with their own error, and the refused commit is never exported.
func TestFetchVerifyCommit(t *testing.T) {
	alice, alicePub := newPGPKey(t, "alice")
	_, bobPub := newPGPKey(t, "bob")
	sshKey, sshPub, sshFP := newSSHSigningKey(t)
	_, otherSSHPub, _ := newSSHSigningKey(t)

	r := newTestRepo(t)
	pgpHead := r.commitPGP("pgp", map[string]string{"a.yaml": "a\n"}, alice)
	r.git("checkout", "-q", "-b", "ssh")
	sshHead := r.commitSSH("ssh", map[string]string{"a.yaml": "ssh\n"}, sshKey)
	r.git("checkout", "-q", "-b", "unsigned", "main")
	unsigned := r.commit("unsigned", map[string]string{"a.yaml": "evil\n"})
	forged := r.forge("tampered", unsigned, pgpHead)
	r.git("checkout", "-q", "-b", "ssh-tampered", "main")
	sshUnsigned := r.commit("unsigned", map[string]string{"a.yaml": "evil too\n"})
	sshForged := r.forge("ssh-tampered", sshUnsigned, sshHead)
	r.git("checkout", "-q", "main")
	r.push()
	url, _ := serveHTTP(t, r.root, nil)

	tests := []struct {
		name    string
		branch  string
		keys    map[string][]byte
		want    []Signature
		wantErr error
		wantMsg string
	}{
		{name: "good PGP signature", branch: "main", keys: map[string][]byte{"alice.asc": alicePub, "bob.asc": bobPub},
			want: []Signature{{Object: "commit " + pgpHead, Key: "PGP key " + fingerprint(alice), Source: "alice.asc"}}},
		{name: "good SSH signature", branch: "ssh", keys: map[string][]byte{"alice.asc": alicePub, "signers": append(otherSSHPub, sshPub...)},
			want: []Signature{{Object: "commit " + sshHead, Key: "SSH key " + sshFP, Source: "signers"}}},
		{name: "unsigned", branch: "unsigned", keys: map[string][]byte{"alice.asc": alicePub},
			wantErr: ErrUnsigned, wantMsg: "commit " + unsigned + " is not signed: sign it with a trusted key (git commit -S)"},
		{name: "PGP key not trusted", branch: "main", keys: map[string][]byte{"bob.asc": bobPub, "ssh": sshPub},
			wantErr: ErrUnknownKey, wantMsg: "commit " + pgpHead + " is signed by a key that is not trusted (PGP key " + fingerprint(alice)},
		{name: "SSH key not trusted", branch: "ssh", keys: map[string][]byte{"other": otherSSHPub},
			wantErr: ErrUnknownKey, wantMsg: "(SSH key " + sshFP + ", 1 trusted SSH keys)"},
		{name: "PGP signature of another commit", branch: "tampered", keys: map[string][]byte{"alice.asc": alicePub},
			wantErr: ErrBadSignature, wantMsg: "commit " + forged + ": signature does not verify by PGP key " + fingerprint(alice) + ` of "alice.asc"`},
		{name: "SSH signature of another commit", branch: "ssh-tampered", keys: map[string][]byte{"ssh": sshPub},
			wantErr: ErrBadSignature, wantMsg: "commit " + sshForged + ": signature does not verify by SSH key " + sshFP},
		{name: "no keys", branch: "main", keys: map[string][]byte{},
			wantErr: ErrNoKeys, wantMsg: "the verification Secret holds no key"},
		{name: "unreadable key", branch: "main", keys: map[string][]byte{"alice.asc": alicePub, "notes": []byte("ssh-ed25519 AAAA\n")},
			wantErr: ErrNoKeys, wantMsg: `key "notes": line 1 is not an SSH public key`},
		{name: "broken PGP block", branch: "main", keys: map[string][]byte{"alice.asc": alicePub[:len(alicePub)/2]},
			wantErr: ErrNoKeys, wantMsg: `key "alice.asc": not an armored PGP public key block`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := NewFetcher(t.TempDir())
			co, err := fetch(t, f, Repository{URL: url, Ref: Ref{Branch: tt.branch}, Verify: &Verification{Keys: tt.keys}})
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Fetch: %v", err)
				}
				if diff := cmp.Diff(tt.want, co.Signatures); diff != "" {
					t.Errorf("signatures (-want +got):\n%s", diff)
				}
				return
			}
			var ve *VerificationError
			if !errors.Is(err, tt.wantErr) || !errors.As(err, &ve) || !IsTerminal(err) {
				t.Fatalf("Fetch error = %v, want a terminal VerificationError wrapping %v", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) || !strings.Contains(err.Error(), "(mode HEAD)") {
				t.Errorf("error %q\nshould contain %q and the mode", err, tt.wantMsg)
			}
			sha := r.git("rev-parse", tt.branch)
			if exported(t, f, sha) {
				t.Errorf("commit %s was exported although its verification failed", sha)
			}
		})
	}
}

// TestFetchVerifyCachedCommit: a commit in the cache is verified again on every fetch,
// against that fetch's keys: one fetcher serves the same commit to a fetch with the
// signer's key, then refuses it to one with another key and to one asking for a Tag mode.
func TestFetchVerifyCachedCommit(t *testing.T) {
	alice, alicePub := newPGPKey(t, "alice")
	_, bobPub := newPGPKey(t, "bob")
	r := newTestRepo(t)
	head := r.commitPGP("pgp", map[string]string{"a.yaml": "a\n"}, alice)
	r.push()
	url, _ := serveHTTP(t, r.root, nil)
	f := NewFetcher(t.TempDir())

	if _, err := fetch(t, f, Repository{URL: url, Ref: Ref{Branch: "main"}}); err != nil {
		t.Fatalf("Fetch without verification: %v", err)
	}
	co, err := fetch(t, f, Repository{URL: url, Ref: Ref{Branch: "main"}, Verify: &Verification{Keys: map[string][]byte{"alice.asc": alicePub}}})
	if err != nil {
		t.Fatalf("Fetch with the signer's key: %v", err)
	}
	if diff := cmp.Diff([]Signature{{Object: "commit " + head, Key: "PGP key " + fingerprint(alice), Source: "alice.asc"}}, co.Signatures); diff != "" {
		t.Errorf("signatures (-want +got):\n%s", diff)
	}
	_, err = fetch(t, f, Repository{URL: url, Ref: Ref{Branch: "main"}, Verify: &Verification{Keys: map[string][]byte{"bob.asc": bobPub}}})
	if !errors.Is(err, ErrUnknownKey) {
		t.Errorf("Fetch of the cached commit with another key: error = %v, want ErrUnknownKey", err)
	}
	_, err = fetch(t, f, Repository{URL: url, Ref: Ref{Branch: "main"}, Verify: &Verification{Mode: VerifyTag, Keys: map[string][]byte{"alice.asc": alicePub}}})
	if !errors.Is(err, ErrNoTag) || !strings.Contains(err.Error(), "branch main: no annotated tag to verify: mode Tag needs a tag or semver ref") {
		t.Errorf("Fetch of a branch in mode Tag: error = %v, want ErrNoTag naming the branch", err)
	}
	if diff := cmp.Diff(Stats{Lookups: 4, Transfers: 1}, f.Stats()); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
}
