package daemon

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
)

// dummyKey stands in for a missing secret so that a request for a Sync without one costs the
// same hashing as a request with a wrong signature.
var dummyKey = []byte("converge: no webhook secret for this path")

// authentic checks a GitHub HMAC signature or a GitLab token against secret in constant time
// (a nil secret never matches). It also returns the keys under which this delivery is
// remembered against replays: GitHub's X-GitHub-Delivery and the signature itself (the
// delivery ID is not signed, the body is: a replay under a new ID is still the same
// signature); GitLab's Idempotency-Key or X-Gitlab-Event-UUID (its token signs nothing, so
// these only stop repeats, not forgeries).
func authentic(req *http.Request, body, secret []byte) (bool, []string) {
	key := secret
	if key == nil {
		key = dummyKey
	}
	if sig, ok := strings.CutPrefix(req.Header.Get("X-Hub-Signature-256"), "sha256="); ok {
		mac := hmac.New(sha256.New, key)
		mac.Write(body)
		want := hex.EncodeToString(mac.Sum(nil))
		keys := []string{"sha256=" + want}
		if id := req.Header.Get("X-GitHub-Delivery"); id != "" {
			keys = append(keys, "github:"+id)
		}
		return secret != nil && hmac.Equal([]byte(sig), []byte(want)), keys
	}
	if tok := req.Header.Get("X-Gitlab-Token"); tok != "" {
		// Compare digests: their length is fixed, so the time does not depend on the token's.
		got, want := sha256.Sum256([]byte(tok)), sha256.Sum256(key)
		var keys []string
		if id := req.Header.Get("Idempotency-Key"); id != "" {
			keys = append(keys, "gitlab:"+id)
		} else if id := req.Header.Get("X-Gitlab-Event-UUID"); id != "" {
			keys = append(keys, "gitlab:"+id)
		}
		return secret != nil && hmac.Equal(got[:], want[:]), keys
	}
	return false, nil
}
