package daemon

import (
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/lru"
)

// tokens remembers, for a short while, the webhook token each Sync's Secret held (or that it
// held none), so that the webhook does not read a Secret from the API server on every
// request: any caller may send requests, signed or not. An entry is keyed by the Sync's UID
// and the Secret's name, so a re-created Sync or a new secretRef reads afresh.
type tokens struct {
	ttl time.Duration
	m   *lru.Cache // tokenKey → token; safe for concurrent use
	now func() time.Time
}

type tokenKey struct {
	uid    types.UID
	secret string
}

// token is a Secret's webhook token, or nil and why there is none (for the log).
type token struct {
	value []byte
	why   string
	read  time.Time
}

func newTokens(ttl time.Duration, syncs int) *tokens {
	return &tokens{ttl: ttl, m: lru.New(syncs), now: time.Now}
}

// get returns the token remembered for k if it was read within the TTL, else calls read
// and remembers its answer when read says it may. Concurrent misses may both read.
func (t *tokens) get(k tokenKey, read func() (token, bool)) token {
	v, ok := t.m.Get(k)
	now := t.now()
	if ok && now.Sub(v.(token).read) < t.ttl {
		return v.(token)
	}
	tok, cache := read()
	if cache {
		tok.read = now
		t.m.Add(k, tok)
	}
	return tok
}
