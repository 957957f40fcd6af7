package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
)

// authentic checks a GitHub HMAC signature or a GitLab token against secret in constant time,
// reading the body (already bounded by the caller) as a stream into the hash: nothing of it is
// kept but digests. A request with neither header, or with a wrong GitLab token, is refused
// without reading the body. err is the body's read error (too large, too slow, cut).
//
// It also returns the keys under which this delivery is remembered against replays, at least
// one of them a digest of the body, so that changing an unsigned header never makes the same
// delivery count twice:
//   - GitHub: the signature itself (an HMAC of the body) and X-GitHub-Delivery (not signed:
//     a replay under a new ID is still the same signature).
//   - GitLab: the SHA-256 of the body (its token signs nothing: a replay under a new
//     Idempotency-Key is still the same body), and Idempotency-Key or X-Gitlab-Event-UUID,
//     which stop GitLab's own retries.
func authentic(req *http.Request, body io.Reader, secret []byte) (ok bool, keys []string, err error) {
	if len(secret) == 0 {
		return false, nil, nil
	}
	if sig, found := strings.CutPrefix(req.Header.Get("X-Hub-Signature-256"), "sha256="); found {
		mac := hmac.New(sha256.New, secret)
		if _, err := io.Copy(mac, body); err != nil {
			return false, nil, err
		}
		want := hex.EncodeToString(mac.Sum(nil))
		keys = []string{"sha256=" + want}
		if id := req.Header.Get("X-GitHub-Delivery"); id != "" {
			keys = append(keys, "github:"+id)
		}
		return hmac.Equal([]byte(sig), []byte(want)), keys, nil
	}
	if tok := req.Header.Get("X-Gitlab-Token"); tok != "" {
		// Compare digests: their length is fixed, so the time does not depend on the token's.
		got, want := sha256.Sum256([]byte(tok)), sha256.Sum256(secret)
		if !hmac.Equal(got[:], want[:]) {
			return false, nil, nil
		}
		digest := sha256.New()
		if _, err := io.Copy(digest, body); err != nil {
			return false, nil, err
		}
		keys = []string{"body:" + hex.EncodeToString(digest.Sum(nil))}
		if id := req.Header.Get("Idempotency-Key"); id != "" {
			keys = append(keys, "gitlab:"+id)
		} else if id := req.Header.Get("X-Gitlab-Event-UUID"); id != "" {
			keys = append(keys, "gitlab:"+id)
		}
		return true, keys, nil
	}
	return false, nil, nil
}
