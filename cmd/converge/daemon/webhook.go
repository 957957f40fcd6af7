package daemon

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// webhookTokenKey is the key of the Secret named by spec.webhook.secretRef, as in a Flux
// Receiver's Secret.
const webhookTokenKey = "token"

// webhookOptions bound what one caller of the webhook may cost the daemon.
type webhookOptions struct {
	// MaxBodyBytes is the largest body read; a larger one gets 413.
	MaxBodyBytes int64
	// APITimeout bounds the reads of the Sync and its Secret and the patch of one request.
	APITimeout time.Duration
	// ReplayWindow is how long a handled delivery is remembered and its repeats ignored.
	ReplayWindow time.Duration
	// DeliveriesPerSync and Syncs bound that memory (least recently used first out).
	DeliveriesPerSync, Syncs int
	// TokenTTL is how long the token read from a Sync's Secret is used before the Secret is
	// read again: requests from anyone, signed or not, cost at most one Secret read per Sync
	// and TokenTTL (and answer as fast for an existing Sync as for a missing one), and a
	// rotated token takes effect within TokenTTL. Syncs bounds this memory too.
	TokenTTL time.Duration
	// Server bounds slow clients.
	Server serverLimits
}

// defaultWebhookOptions fit GitHub and GitLab push events (GitHub caps payloads at 25 MB but a
// push of a few commits is a few KB; the body is only hashed, never parsed).
func defaultWebhookOptions() webhookOptions {
	return webhookOptions{
		MaxBodyBytes:      1 << 20,
		APITimeout:        10 * time.Second,
		ReplayWindow:      24 * time.Hour,
		DeliveriesPerSync: 256,
		Syncs:             4096,
		TokenTTL:          10 * time.Second,
		Server: serverLimits{
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       15 * time.Second,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       60 * time.Second,
			MaxHeaderBytes:    32 << 10,
		},
	}
}

// webhook receives git push notifications on POST /hooks/<namespace>/<name> and asks for an
// immediate reconcile of that Sync by setting its converge.dev/requestedAt annotation.
//
// Each Sync is signed by its own Secret (spec.webhook.secretRef, key "token"): GitHub requests
// are checked with X-Hub-Signature-256 (HMAC-SHA256 of the body), GitLab requests with
// X-Gitlab-Token. A Sync without spec.webhook is never triggered. A missing Sync, a Sync
// without a secret and a wrong signature get the same answer, so a caller learns nothing about
// which Syncs exist.
type webhook struct {
	addr string
	// syncs reads Syncs (the manager's cache: it watches them anyway).
	syncs client.Reader
	// secrets reads the one Secret a Sync names, from the API server: the daemon may get
	// Secrets but is not meant to list or watch them. tokens remembers what it read.
	secrets client.Reader
	// client patches the requestedAt annotation.
	client client.Writer
	log    logr.Logger
	opts   webhookOptions
	seen   *deliveries // set by runnable
	tokens *tokens     // set by runnable
}

// runnable serves the hooks on every replica: the annotation reaches the leader. Each
// replica remembers the deliveries it handled; a load balancer that sends a repeat to
// another replica triggers one more reconcile, no more.
func (w *webhook) runnable() httpRunnable {
	w.seen = newDeliveries(w.opts.ReplayWindow, w.opts.DeliveriesPerSync, w.opts.Syncs)
	w.tokens = newTokens(w.opts.TokenTTL, w.opts.Syncs)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /hooks/{namespace}/{name}", w.handle)
	return httpRunnable{addr: w.addr, handler: mux, limits: w.opts.Server}
}

// refuse is the one answer to every request that is not authentic, whatever the reason.
func refuse(rw http.ResponseWriter) {
	http.Error(rw, "unauthorized", http.StatusUnauthorized)
}

func (w *webhook) handle(rw http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(rw, req.Body, w.opts.MaxBodyBytes))
	if err != nil {
		if tooBig := (*http.MaxBytesError)(nil); errors.As(err, &tooBig) {
			http.Error(rw, "body larger than "+strconv.FormatInt(tooBig.Limit, 10)+" bytes", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(rw, "cannot read body", http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(req.Context(), w.opts.APITimeout)
	defer cancel()
	key := client.ObjectKey{Namespace: req.PathValue("namespace"), Name: req.PathValue("name")}
	log := w.log.WithValues("sync", key)
	uid, secret, why := w.secretOf(ctx, key)
	ok, deliveryKeys := authentic(req, body, secret)
	if !ok || secret == nil {
		if why == "" {
			why = "signature or token missing or wrong"
		}
		log.V(1).Info("webhook request refused", "reason", why)
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

// secretOf reads the Sync and the token of the Secret it names (see tokenOf). It returns a
// nil secret and the reason (for the log only, never shown to the caller) when there is none.
func (w *webhook) secretOf(ctx context.Context, key client.ObjectKey) (types.UID, []byte, string) {
	s := &v1alpha1.Sync{}
	if err := w.syncs.Get(ctx, key, s); err != nil {
		// Not an error log: any caller can name a namespace outside the cache.
		return "", nil, "cannot read the Sync: " + err.Error()
	}
	if s.Spec.Webhook == nil || s.Spec.Webhook.SecretRef.Name == "" {
		return "", nil, "the Sync has no spec.webhook.secretRef"
	}
	ref := client.ObjectKey{Namespace: key.Namespace, Name: s.Spec.Webhook.SecretRef.Name}
	t := w.tokens.get(tokenKey{s.UID, ref.Name}, func() (token, bool) { return w.tokenOf(ctx, key, ref) })
	if t.value == nil {
		return "", nil, t.why
	}
	return s.UID, t.value, ""
}

// tokenOf reads the token of Secret ref, named by Sync key, from the API server, and says
// whether the answer may be cached: an error other than NotFound (RBAC, a timeout) is not,
// and is logged as an error, for the operator.
//
// It reads as the daemon, not as the Sync's service account (unlike the git Secret, see
// engineSet.secret): the token only checks a request's signature and is sent nowhere, so
// naming another Secret lets a Sync's author learn nothing of it.
func (w *webhook) tokenOf(ctx context.Context, key, ref client.ObjectKey) (token, bool) {
	sec := &corev1.Secret{}
	if err := w.secrets.Get(ctx, ref, sec); err != nil {
		if !apierrors.IsNotFound(err) {
			w.log.Error(err, "webhook: cannot read the Sync's Secret", "sync", key, "secret", ref.Name)
			return token{why: "cannot read Secret " + ref.Name}, false
		}
		return token{why: "cannot read Secret " + ref.Name}, true
	}
	value := []byte(strings.TrimSpace(string(sec.Data[webhookTokenKey])))
	if len(value) == 0 {
		return token{why: "Secret " + ref.Name + " has no key " + webhookTokenKey}, true
	}
	return token{value: value}, true
}

// request sets the requestedAt annotation of the Sync whose secret signed the request, and
// only of that one: the patch carries its UID, so a Sync recreated under the same name in
// between (with another secret) is refused by the API server.
func (w *webhook) request(ctx context.Context, key client.ObjectKey, uid types.UID) error {
	_, patch, err := v1alpha1.ReconcileRequest(uid, time.Now())
	if err != nil {
		return err
	}
	s := &v1alpha1.Sync{}
	s.Namespace, s.Name = key.Namespace, key.Name
	return w.client.Patch(ctx, s, client.RawPatch(types.MergePatchType, patch))
}
