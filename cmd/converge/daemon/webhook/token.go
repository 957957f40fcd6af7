package webhook

import (
	"context"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/lru"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// secretGetter reads one Secret from the API server as a user ("" is the daemon).
type secretGetter interface {
	getSecret(ctx context.Context, user string, key client.ObjectKey) (*corev1.Secret, error)
}

// impersonatingSecrets is a secretGetter on one client of the daemon's, each request
// impersonating its user with the Impersonate-User header, as the daemon's engines' clients
// do: one client and connection pool for every identity, none kept per user.
type impersonatingSecrets struct{ rest rest.Interface }

func newImpersonatingSecrets(cfg *rest.Config) (impersonatingSecrets, error) {
	c, err := corev1client.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		return impersonatingSecrets{}, fmt.Errorf("webhook secrets client: %w", err)
	}
	return impersonatingSecrets{rest: c.RESTClient()}, nil
}

func (s impersonatingSecrets) getSecret(ctx context.Context, user string, key client.ObjectKey) (*corev1.Secret, error) {
	r := s.rest.Get().Namespace(key.Namespace).Resource("secrets").Name(key.Name)
	if user != "" {
		r = r.SetHeader(authenticationv1.ImpersonateUserHeader, user)
	}
	sec := &corev1.Secret{}
	return sec, r.Do(ctx).Into(sec)
}

// tokens remembers, for a short while, the webhook token each Sync's Secret held (or that it
// held none), so that the webhook does not read a Secret from the API server on every
// request: any caller may send requests, signed or not. An entry is keyed by the Sync's UID,
// the Secret's name and the user it was read as, so a re-created Sync, a new secretRef or a
// new serviceAccountName reads afresh.
type tokens struct {
	ttl time.Duration
	m   *lru.Cache // tokenKey → token; safe for concurrent use
	now func() time.Time
}

type tokenKey struct {
	uid    types.UID
	secret string
	user   string
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
