package daemon

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// instrument wraps a transport of the daemon's rest.Config to count API requests.
func (r *recorder) instrument(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		code := "error"
		if err == nil {
			code = strconv.Itoa(resp.StatusCode)
		}
		r.apiRequests.WithLabelValues(requestVerb(req), code).Inc()
		return resp, err
	})
}

// requestVerb is the lower-case HTTP method, or "watch" for a watch request; the Kubernetes
// verb (get or list, update or patch) would need the URL parsed against discovery.
func requestVerb(req *http.Request) string {
	if req.Method == http.MethodGet && req.URL.Query().Get("watch") == "true" {
		return "watch"
	}
	return strings.ToLower(req.Method)
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// conflictCounting is the client of the status writer: it counts the 409s of Sync status
// patches, each of which the writer re-reads and retries.
type conflictCounting struct {
	client.Client
	rec *recorder
}

func (c conflictCounting) Status() client.SubResourceWriter {
	return statusConflictCounting{SubResourceWriter: c.Client.Status(), rec: c.rec}
}

type statusConflictCounting struct {
	client.SubResourceWriter
	rec *recorder
}

func (s statusConflictCounting) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	err := s.SubResourceWriter.Patch(ctx, obj, patch, opts...)
	if apierrors.IsConflict(err) {
		s.rec.statusConflict(obj.GetNamespace(), obj.GetName())
	}
	return err
}
