package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// startupRetry is how long the daemon retries the API server's transient errors while it
// starts (the 503 of an API server restarting or of its aggregated discovery, 429, a
// timeout, a refused connection). A replica started during such a hiccup comes up when it
// ends, instead of exiting into a crash loop whose back-off delays it by minutes, or (in a
// test harness, on a laptop) not coming back at all. Past it the error is returned: an API
// server down for minutes is for the operator to see, in the pod's restarts. (The base's
// startupProbe gives a starting pod 5 minutes before its liveness probe counts.)
const startupRetry = 2 * time.Minute

// startupBackoff is the first wait between two attempts; it doubles up to startupBackoffMax.
const (
	startupBackoff    = 200 * time.Millisecond
	startupBackoffMax = 5 * time.Second
)

// retryStartup runs the start-up step f (named by what, for the log) until it succeeds,
// fails with an error that is not transient (returned at once: RBAC, a missing CRD, a bad
// flag are not cured by waiting), ctx ends, or startupRetry has passed. f must be safe to
// run again after a failure.
func retryStartup(ctx context.Context, what string, f func(context.Context) error) error {
	log := ctrl.Log.WithName("startup")
	deadline := time.Now().Add(startupRetry)
	wait := startupBackoff
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithDeadline(ctx, deadline) // no attempt outlives the retries
		err := f(actx)
		cancel()
		if err == nil || !transientAPIError(err) || ctx.Err() != nil {
			return err
		}
		if time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("%s: the API server kept failing for %s: %w", what, startupRetry, err)
		}
		log.Info("the API server failed a start-up step with a transient error; retrying", "step", what, "attempt", attempt, "in", wait, "error", err.Error())
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, startupBackoffMax)
	}
}

// transientAPIError reports whether err is one that an API server (or the path to it)
// answers for a while and then stops answering: overload, a restart, a timeout, a dropped
// connection. Discovery and REST mapping errors wrap the API server's answer, which decides.
func transientAPIError(err error) bool {
	switch {
	case err == nil:
		return false
	case meta.IsNoMatchError(err):
		return false // the kind is not served: a missing CRD (--install-crd=false), not a hiccup
	case apierrors.IsServiceUnavailable(err), apierrors.IsTooManyRequests(err),
		apierrors.IsServerTimeout(err), apierrors.IsTimeout(err),
		apierrors.IsInternalError(err), apierrors.IsUnexpectedServerError(err):
		return true
	case utilnet.IsConnectionRefused(err), utilnet.IsConnectionReset(err),
		utilnet.IsProbableEOF(err), utilnet.IsHTTP2ConnectionLost(err),
		errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, context.DeadlineExceeded):
		return true
	}
	var timeout interface{ Timeout() bool } // dial, TLS handshake, response header timeouts
	return errors.As(err, &timeout) && timeout.Timeout()
}

// warmSyncMapping resolves the Sync kind through the manager's REST mapper, with the
// start-up retries: the controller's setup (its informer, the dependsOn index) resolves it
// once and returns the error, which no later attempt can repeat (an index cannot be
// registered twice).
func warmSyncMapping(ctx context.Context, mgr ctrl.Manager) error {
	gvk := v1alpha1.GroupVersion.WithKind("Sync")
	return retryStartup(ctx, "resolving the Sync kind", func(context.Context) error {
		_, err := mgr.GetRESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
		return err
	})
}
