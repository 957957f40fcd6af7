package webhook

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/cmd/converge/daemon/httpserve"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// TokenKey is the key of the Secret named by spec.webhook.secretRef, as in a Flux
// Receiver's Secret.
const TokenKey = "token"

// Options bound what one caller of the webhook may cost the daemon.
type Options struct {
	// MaxBodyBytes is the largest body read; a larger one gets 413. The body is streamed
	// into the signature check, never held: this bounds the time a request costs, not memory.
	MaxBodyBytes int64
	// MaxConcurrent is how many requests are handled at once; one more is answered 503 at
	// once, with Retry-After, before anything is read of it.
	MaxConcurrent int
	// APITimeout bounds the reads of the Sync and its Secret and the patch of one request.
	APITimeout time.Duration
	// ReplayWindow is how long a handled delivery is remembered and its repeats ignored.
	ReplayWindow time.Duration
	// DeliveriesPerSync and Syncs bound that memory (least recently used first out).
	DeliveriesPerSync, Syncs int
	// TokenTTL is how long the token read from a Sync's Secret is used before the Secret is
	// read again: requests from anyone, signed or not, cost at most one Secret read per Sync
	// and TokenTTL, and a rotated token takes effect within TokenTTL. A read refused by RBAC
	// or failed is not remembered. Syncs bounds this memory too.
	TokenTTL time.Duration
	// Server bounds slow clients and how many connections are open at once.
	Server httpserve.Limits
}

// DefaultOptions fit GitHub and GitLab push events (GitHub caps payloads at 25 MB but a
// push of a few commits is a few KB; the body is only hashed, never parsed).
func DefaultOptions() Options {
	return Options{
		MaxBodyBytes:      1 << 20,
		MaxConcurrent:     32,
		APITimeout:        10 * time.Second,
		ReplayWindow:      24 * time.Hour,
		DeliveriesPerSync: 256,
		Syncs:             4096,
		TokenTTL:          10 * time.Second,
		Server: httpserve.Limits{
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       15 * time.Second,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       5 * time.Second, // idle keep-alives must not hold the connection cap
			MaxHeaderBytes:    32 << 10,
			MaxConns:          256,
		},
	}
}

// Receiver receives git push notifications on POST /hooks/<namespace>/<name> and asks for an
// immediate reconcile of that Sync by setting its converge.dev/requestedAt annotation.
//
// Each Sync is signed by its own Secret (spec.webhook.secretRef, key "token"), read as the
// Sync's identity (its spec.serviceAccountName, else --default-service-account: Config.User,
// as every other read of the Sync's): GitHub requests are checked with X-Hub-Signature-256
// (HMAC-SHA256 of the body), GitLab requests with X-Gitlab-Token. A Sync without spec.webhook
// is never triggered. A missing Sync, a Sync without a secret it may read and a wrong
// signature get the same answer. The Sync and its secret are found before the body is read:
// a request for a path without a secret is answered without reading its body.
type Receiver struct {
	addr string
	// syncs reads Syncs (the manager's cache: it watches them anyway).
	syncs client.Reader
	// secrets reads the one Secret a Sync names, from the API server, as the Sync's
	// identity: the daemon may get Secrets but is not meant to list or watch them. tokens
	// remembers what it read.
	secrets secretGetter
	// user names the user a Sync acts as ("" is the daemon's own identity).
	user func(*v1alpha1.Sync) string
	// client patches the requestedAt annotation.
	client client.Writer
	log    logr.Logger
	opts   Options
	seen   *deliveries
	tokens *tokens
	slots  chan struct{} // one per request being handled
}

// Config is what a Receiver reads, writes and serves with.
type Config struct {
	// Addr is the address served.
	Addr string
	// Syncs reads Syncs; Client patches their requestedAt annotation.
	Syncs  client.Reader
	Client client.Writer
	// REST is the daemon's connection to the API server: each Sync's Secret is read with it,
	// impersonating the user the Sync acts as.
	REST *rest.Config
	// User names the user a Sync acts as ("" is the daemon's own identity); required.
	User func(*v1alpha1.Sync) string
	Log  logr.Logger
	// Options bound what a caller may cost (zero: DefaultOptions()).
	Options Options
}

// New returns the Receiver of c.
func New(c Config) (*Receiver, error) {
	if c.User == nil {
		return nil, errors.New("webhook: no Config.User: whose rights a Secret is read with is unknown")
	}
	if c.Options == (Options{}) {
		c.Options = DefaultOptions()
	}
	secrets, err := newImpersonatingSecrets(c.REST)
	if err != nil {
		return nil, err
	}
	o := c.Options
	return &Receiver{addr: c.Addr, syncs: c.Syncs, secrets: secrets, user: c.User, client: c.Client, log: c.Log, opts: o,
		seen:   newDeliveries(o.ReplayWindow, o.DeliveriesPerSync, o.Syncs),
		tokens: newTokens(o.TokenTTL, o.Syncs),
		slots:  make(chan struct{}, max(o.MaxConcurrent, 1))}, nil
}

// Runnable serves the hooks on every replica: the annotation reaches the leader. Each
// replica remembers the deliveries it handled; a load balancer that sends a repeat to
// another replica triggers one more reconcile, no more.
func (w *Receiver) Runnable() httpserve.Runnable {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /hooks/{namespace}/{name}", w.handle)
	return httpserve.Runnable{Addr: w.addr, Handler: mux, Limits: w.opts.Server}
}

// refuse is the one answer to every request that is not authentic, whatever the reason. The
// connection is closed after it: what is left of the body is never read.
func refuse(rw http.ResponseWriter) {
	rw.Header().Set("Connection", "close")
	http.Error(rw, "unauthorized", http.StatusUnauthorized)
}

// tooLarge answers a body over limit; the connection is closed after it.
func tooLarge(rw http.ResponseWriter, limit int64) {
	rw.Header().Set("Connection", "close")
	http.Error(rw, "body larger than "+strconv.FormatInt(limit, 10)+" bytes", http.StatusRequestEntityTooLarge)
}

func (w *Receiver) handle(rw http.ResponseWriter, req *http.Request) {
	select {
	case w.slots <- struct{}{}:
		defer func() { <-w.slots }()
	default:
		rw.Header().Set("Retry-After", "1")
		rw.Header().Set("Connection", "close")
		http.Error(rw, "too many webhook requests at once, retry later", http.StatusServiceUnavailable)
		return
	}
	if req.ContentLength > w.opts.MaxBodyBytes {
		tooLarge(rw, w.opts.MaxBodyBytes)
		return
	}
	ctx, cancel := context.WithTimeout(req.Context(), w.opts.APITimeout)
	defer cancel()
	key := client.ObjectKey{Namespace: req.PathValue("namespace"), Name: req.PathValue("name")}
	log := w.log.WithValues("sync", key)
	uid, secret, why := w.secretOf(ctx, key)
	if secret == nil { // the body is not read
		log.V(1).Info("webhook request refused", "reason", why)
		refuse(rw)
		return
	}
	ok, deliveryKeys, err := authentic(req, http.MaxBytesReader(rw, req.Body, w.opts.MaxBodyBytes), secret)
	if err != nil {
		if tooBig := (*http.MaxBytesError)(nil); errors.As(err, &tooBig) {
			tooLarge(rw, tooBig.Limit)
			return
		}
		rw.Header().Set("Connection", "close")
		http.Error(rw, "cannot read body", http.StatusBadRequest)
		return
	}
	if !ok {
		log.V(1).Info("webhook request refused", "reason", "signature or token missing or wrong")
		refuse(rw)
		return
	}
	if !w.seen.claim(uid, deliveryKeys) {
		log.V(1).Info("webhook delivery already handled", "delivery", deliveryKeys)
		_, _ = io.WriteString(rw, "delivery already handled\n")
		return
	}
	if err := w.request(ctx, key, uid); err != nil {
		w.seen.release(uid, deliveryKeys) // a redelivery of the same event must work
		log.Error(err, "cannot request a reconcile")
		http.Error(rw, "cannot request a reconcile, retry later", http.StatusServiceUnavailable)
		return
	}
	log.Info("reconcile requested by webhook")
	rw.WriteHeader(http.StatusAccepted)
}

// secretOf reads the Sync and the token of the Secret it names, as the Sync's identity (see
// tokenOf). It returns a nil secret and the reason (for the log only, never shown to the
// caller) when there is none.
func (w *Receiver) secretOf(ctx context.Context, key client.ObjectKey) (types.UID, []byte, string) {
	s := &v1alpha1.Sync{}
	if err := w.syncs.Get(ctx, key, s); err != nil {
		// Not an error log: any caller can name a namespace outside the cache.
		return "", nil, "cannot read the Sync: " + err.Error()
	}
	if s.Spec.Webhook == nil || s.Spec.Webhook.SecretRef.Name == "" {
		return "", nil, "the Sync has no spec.webhook.secretRef"
	}
	ref := client.ObjectKey{Namespace: key.Namespace, Name: s.Spec.Webhook.SecretRef.Name}
	user := w.user(s)
	t := w.tokens.get(tokenKey{s.UID, ref.Name, user}, func() (token, bool) { return w.tokenOf(ctx, key, ref, user) })
	if t.value == nil {
		return "", nil, t.why
	}
	return s.UID, t.value, ""
}

// tokenOf reads the token of Secret ref, named by Sync key, from the API server as user (the
// Sync's identity, as the daemon reads its git Secret), and says whether the answer may
// be cached: an error other than NotFound (RBAC, a timeout) is not, and is logged, for the
// operator. Read as the daemon, a Sync's author could have any Secret of the namespace, even
// one they may not read, sign requests; a Sync whose identity may not read the Secret is
// never triggered.
func (w *Receiver) tokenOf(ctx context.Context, key, ref client.ObjectKey, user string) (token, bool) {
	sec, err := w.secrets.getSecret(ctx, user, ref)
	if err != nil {
		if !apierrors.IsNotFound(err) {
			w.log.Error(err, "webhook: cannot read the Sync's Secret", "sync", key, "secret", ref.Name, "user", userName(user))
			return token{why: "cannot read Secret " + ref.Name}, false
		}
		return token{why: "cannot read Secret " + ref.Name}, true
	}
	value := []byte(strings.TrimSpace(string(sec.Data[TokenKey])))
	if len(value) == 0 {
		return token{why: "Secret " + ref.Name + " has no key " + TokenKey}, true
	}
	return token{value: value}, true
}

// request sets the requestedAt annotation of the Sync whose secret signed the request, and
// only of that one: the patch carries its UID, so a Sync recreated under the same name in
// between (with another secret) is refused by the API server.
func (w *Receiver) request(ctx context.Context, key client.ObjectKey, uid types.UID) error {
	_, patch, err := v1alpha1.ReconcileRequest(uid, time.Now())
	if err != nil {
		return err
	}
	s := &v1alpha1.Sync{}
	s.Namespace, s.Name = key.Namespace, key.Name
	return w.client.Patch(ctx, s, client.RawPatch(types.MergePatchType, patch))
}

// userName names user for messages ("" is the daemon).
func userName(user string) string {
	if user == "" {
		return "the daemon"
	}
	return user
}
