package fault

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
)

type requestInfo struct{ verb, resource, subresource, name string }

// parse derives the Kubernetes verb, resource, subresource and name from a request path like
// /api/v1/namespaces/ns/configmaps/name or /apis/g/v/namespaces/ns/r/name/status.
func parse(req *http.Request) requestInfo {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return requestInfo{verb: strings.ToLower(req.Method)}
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	var info requestInfo
	if len(parts) > 0 {
		info.resource = parts[0]
	}
	if len(parts) > 1 {
		info.name = parts[1]
	}
	if len(parts) > 2 {
		info.subresource = parts[2]
	}
	switch req.Method {
	case http.MethodGet:
		switch {
		case req.URL.Query().Get("watch") == "true" || req.URL.Query().Get("watch") == "1":
			info.verb = "watch"
		case info.name == "":
			info.verb = "list"
		default:
			info.verb = "get"
		}
	case http.MethodPost:
		info.verb = "create"
	case http.MethodPut:
		info.verb = "update"
	case http.MethodPatch:
		info.verb = "patch"
	case http.MethodDelete:
		info.verb = "delete"
		if info.name == "" {
			info.verb = "deletecollection"
		}
	default:
		info.verb = strings.ToLower(req.Method)
	}
	return info
}

var reasons = map[int]string{403: "Forbidden", 404: "NotFound", 409: "Conflict", 410: "Expired", 422: "Invalid",
	429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable"}

func statusJSON(code int, message string) string {
	return fmt.Sprintf(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":%q,"reason":%q,"code":%d}`,
		message, reasons[code], code)
}

// statusResponse is a Kubernetes Status error response with code.
func statusResponse(req *http.Request, code int) *http.Response {
	h := http.Header{"Content-Type": []string{"application/json"}}
	if code == http.StatusTooManyRequests {
		h.Set("Retry-After", "1")
	}
	return response(req, code, h, statusJSON(code, fmt.Sprintf("fault: injected %d", code)))
}

// expiredWatchResponse is a watch stream whose only event is an ERROR with a 410 Expired
// Status, what kube-apiserver sends when a watch starts from a compacted resourceVersion.
// A client that does not accept JSON gets a plain 410 response.
func expiredWatchResponse(req *http.Request) *http.Response {
	accept := req.Header.Get("Accept")
	if accept != "" && !strings.Contains(accept, "json") && !strings.Contains(accept, "*/*") {
		return statusResponse(req, http.StatusGone)
	}
	event := `{"type":"ERROR","object":` + statusJSON(http.StatusGone, "fault: injected: too old resource version") + "}\n"
	resp := response(req, http.StatusOK, http.Header{"Content-Type": []string{"application/json"}}, event)
	resp.ContentLength = -1 // a stream, as the API server sends it
	return resp
}

func response(req *http.Request, code int, h http.Header, body string) *http.Response {
	return &http.Response{
		StatusCode: code, Status: fmt.Sprintf("%d %s", code, http.StatusText(code)), Header: h,
		Body: io.NopCloser(bytes.NewBufferString(body)), ContentLength: int64(len(body)), Request: req,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
	}
}
