package git

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	gogit "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/google/go-cmp/cmp"
)

// tagPGP creates the annotated tag name on commit sha, signed with e through go-git
// (CreateTagOptions.SignKey).
func (r *testRepo) tagPGP(name, sha string, e *openpgp.Entity) {
	r.t.Helper()
	repo, err := gogit.PlainOpen(r.work)
	if err != nil {
		r.t.Fatal(err)
	}
	_, err = repo.CreateTag(name, plumbing.NewHash(sha), &gogit.CreateTagOptions{
		Tagger:  &object.Signature{Name: "Test", Email: "test@example.com", When: time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)},
		Message: "release " + name, SignKey: e,
	})
	if err != nil {
		r.t.Fatal(err)
	}
}

// TestFetchVerifyTag verifies annotated tags (mode Tag) and tags with their commits (mode
// TagAndHEAD): PGP and SSH signed tags, by name and through a semver range, are reported;
// a lightweight tag, an unsigned annotated tag, a branch or a commit ref in a Tag mode, and
// a signed tag on an unsigned commit in mode HEAD fail with their own error.
func TestFetchVerifyTag(t *testing.T) {
	alice, alicePub := newPGPKey(t, "alice")
	sshKey, sshPub, sshFP := newSSHSigningKey(t)
	r := newTestRepo(t)
	signed := r.commitPGP("signed", map[string]string{"a.yaml": "a\n"}, alice)
	r.tagPGP("v1.0.0", signed, alice)
	unsigned := r.commit("unsigned", map[string]string{"a.yaml": "b\n"})
	r.sshGit(sshKey, "tag", "-s", "-m", "release v1.1.0", "v1.1.0")
	r.git("tag", "v1.2.0")
	r.git("tag", "-a", "-m", "release v1.3.0", "v1.3.0")
	r.push()
	url, _ := serveHTTP(t, r.root, nil)
	keys := map[string][]byte{"alice.asc": alicePub, "ssh": sshPub}
	tagByAlice := Signature{Object: "tag v1.0.0", Key: "PGP key " + fingerprint(alice), Source: "alice.asc"}

	tests := []struct {
		name    string
		ref     Ref
		mode    VerifyMode
		want    []Signature
		wantErr error
		wantMsg string
	}{
		{name: "PGP signed tag", ref: Ref{Tag: "v1.0.0"}, mode: VerifyTag, want: []Signature{tagByAlice}},
		{name: "PGP signed tag and commit", ref: Ref{Tag: "v1.0.0"}, mode: VerifyTagAndHEAD,
			want: []Signature{tagByAlice, {Object: "commit " + signed, Key: "PGP key " + fingerprint(alice), Source: "alice.asc"}}},
		{name: "semver range", ref: Ref{SemVer: "~1.0"}, mode: VerifyTag, want: []Signature{tagByAlice}},
		{name: "SSH signed tag", ref: Ref{Tag: "v1.1.0"}, mode: VerifyTag,
			want: []Signature{{Object: "tag v1.1.0", Key: "SSH key " + sshFP, Source: "ssh"}}},
		{name: "signed tag of an unsigned commit, mode HEAD", ref: Ref{Tag: "v1.1.0"}, mode: VerifyHEAD,
			wantErr: ErrUnsigned, wantMsg: "commit " + unsigned + " is not signed"},
		{name: "signed tag of an unsigned commit, mode TagAndHEAD", ref: Ref{Tag: "v1.1.0"}, mode: VerifyTagAndHEAD,
			wantErr: ErrUnsigned, wantMsg: "commit " + unsigned + " is not signed"},
		{name: "lightweight tag", ref: Ref{Tag: "v1.2.0"}, mode: VerifyTag,
			wantErr: ErrNoTag, wantMsg: "tag v1.2.0 is a lightweight tag, which carries no signature"},
		{name: "unsigned annotated tag", ref: Ref{Tag: "v1.3.0"}, mode: VerifyTag,
			wantErr: ErrUnsigned, wantMsg: "tag v1.3.0 is not signed: sign it with a trusted key (git tag -s)"},
		{name: "commit ref", ref: Ref{Commit: signed}, mode: VerifyTagAndHEAD,
			wantErr: ErrNoTag, wantMsg: "commit " + signed + ": no annotated tag to verify"},
		{name: "default branch", mode: VerifyTag, wantErr: ErrNoTag, wantMsg: "default branch: no annotated tag"},
		{name: "unknown mode", ref: Ref{Tag: "v1.0.0"}, mode: "tag", wantErr: errUnknownMode, wantMsg: `"tag": unknown mode`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			co, err := fetch(t, NewFetcher(t.TempDir()), Repository{URL: url, Ref: tt.ref, Verify: &Verification{Mode: tt.mode, Keys: keys}})
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Fetch: %v", err)
				}
				if diff := cmp.Diff(tt.want, co.Signatures); diff != "" {
					t.Errorf("signatures (-want +got):\n%s", diff)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) || !IsTerminal(err) {
				t.Fatalf("Fetch error = %v, want a terminal error wrapping %v", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q\nshould contain %q", err, tt.wantMsg)
			}
		})
	}
}

// TestFetchVerifyTagOfCachedCommit: a signed tag pushed onto a commit the cache already
// holds (fetched through its branch) is fetched for mode Tag. Without it: the commit
// being cached, no fetch ran and the tag object was missing ("not in the cache after
// fetch").
func TestFetchVerifyTagOfCachedCommit(t *testing.T) {
	alice, alicePub := newPGPKey(t, "alice")
	r := newTestRepo(t)
	head := r.commitPGP("signed", map[string]string{"a.yaml": "a\n"}, alice)
	r.push()
	url, _ := serveHTTP(t, r.root, nil)
	f := NewFetcher(t.TempDir())
	mustFetch(t, f, Repository{URL: url, Ref: Ref{Branch: "main"}})
	r.tagPGP("v2.0.0", head, alice)
	r.push()

	co, err := fetch(t, f, Repository{URL: url, Ref: Ref{Tag: "v2.0.0"}, Verify: &Verification{Mode: VerifyTag, Keys: map[string][]byte{"a.asc": alicePub}}})
	if err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	want := []Signature{{Object: "tag v2.0.0", Key: "PGP key " + fingerprint(alice), Source: "a.asc"}}
	if diff := cmp.Diff(want, co.Signatures); diff != "" {
		t.Errorf("signatures (-want +got):\n%s", diff)
	}
}
