package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/status"
)

// webhook receives git push notifications on POST /hooks/<namespace>/<name> and asks for an
// immediate reconcile of that Sync by setting its converge.dev/requestedAt annotation.
// GitHub requests are checked with X-Hub-Signature-256 (HMAC-SHA256 of the body), GitLab
// requests with X-Gitlab-Token; a request that carries neither is refused.
type webhook struct {
	addr   string
	secret []byte
	client client.Client
	log    logr.Logger
}

// runnable serves the hooks on every replica: the annotation reaches the leader.
func (w *webhook) runnable() httpRunnable {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /hooks/{namespace}/{name}", w.handle)
	return httpRunnable{addr: w.addr, handler: mux}
}

func (w *webhook) handle(rw http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		http.Error(rw, "cannot read body", http.StatusBadRequest)
		return
	}
	if !w.authentic(req, body) {
		http.Error(rw, "signature or token missing or wrong", http.StatusUnauthorized)
		return
	}
	key := client.ObjectKey{Namespace: req.PathValue("namespace"), Name: req.PathValue("name")}
	s := &status.Sync{}
	if err := w.client.Get(req.Context(), key, s); err != nil {
		code := http.StatusInternalServerError
		if apierrors.IsNotFound(err) {
			code = http.StatusNotFound
		}
		http.Error(rw, "sync "+key.String()+": "+err.Error(), code)
		return
	}
	base := s.DeepCopy()
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[status.RequestedAtAnnotation] = time.Now().UTC().Format(time.RFC3339Nano)
	if err := w.client.Patch(req.Context(), s, client.MergeFrom(base)); err != nil {
		http.Error(rw, "sync "+key.String()+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.log.Info("reconcile requested by webhook", "sync", key)
	rw.WriteHeader(http.StatusAccepted)
}

// authentic checks a GitHub HMAC signature or a GitLab token in constant time.
func (w *webhook) authentic(req *http.Request, body []byte) bool {
	if sig, ok := strings.CutPrefix(req.Header.Get("X-Hub-Signature-256"), "sha256="); ok {
		mac := hmac.New(sha256.New, w.secret)
		mac.Write(body)
		want := hex.EncodeToString(mac.Sum(nil))
		return hmac.Equal([]byte(sig), []byte(want))
	}
	if tok := req.Header.Get("X-Gitlab-Token"); tok != "" {
		return subtle.ConstantTimeCompare([]byte(tok), w.secret) == 1
	}
	return false
}
