package git

import (
	"errors"
	"strings"
	"testing"
)

// TestFetchVerifyTagName: someone who may push to the repository but holds no trusted key
// points refs/tags/v2.0.0 at the tag object alice signed as "v1.0.0" (an old release): mode
// Tag refuses it, naming both names, so a Sync pinned to v2.0.0 (or a semver range) is not
// rolled back to an old signed release. Without it: the signed tag's own name was never
// compared with the ref it was reached through.
func TestFetchVerifyTagName(t *testing.T) {
	alice, alicePub := newPGPKey(t, "alice")
	r := newTestRepo(t)
	old := r.commitPGP("old vulnerable release", map[string]string{"a.yaml": "old\n"}, alice)
	r.tagPGP("v1.0.0", old, alice)
	r.commitPGP("current", map[string]string{"a.yaml": "new\n"}, alice)
	tagObj := r.git("rev-parse", "refs/tags/v1.0.0")
	r.git("update-ref", "refs/tags/v2.0.0", tagObj) // no key needed
	r.push()
	url, _ := serveHTTP(t, r.root, nil)
	keys := map[string][]byte{"alice.asc": alicePub}
	for _, ref := range []Ref{{Tag: "v2.0.0"}, {SemVer: ">=2.0.0"}} {
		co, err := fetch(t, NewFetcher(t.TempDir()), Repository{URL: url, Ref: ref, Verify: &Verification{Mode: VerifyTag, Keys: keys}})
		var ve *VerificationError
		if errors.As(err, &ve) && errors.Is(err, ErrBadSignature) && strings.Contains(err.Error(), `signed as tag "v1.0.0"`) {
			continue
		}
		if err != nil {
			t.Errorf("%v: %v, want a VerificationError naming the tag's signed name", ref, err)
			continue
		}
		t.Errorf("%v: accepted the tag object signed as v1.0.0 under refs/tags/v2.0.0: revision %s, signatures %v", ref, co.Revision, co.Signatures)
	}
}
