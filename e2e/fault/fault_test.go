package fault

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name, method, url string
		want              requestInfo
	}{
		{"core get", "GET", "/api/v1/namespaces/a/configmaps/x", requestInfo{"get", "configmaps", "", "x"}},
		{"core list", "GET", "/api/v1/namespaces/a/configmaps", requestInfo{"list", "configmaps", "", ""}},
		{"watch", "GET", "/api/v1/namespaces/a/configmaps?watch=true", requestInfo{"watch", "configmaps", "", ""}},
		{"cluster scoped", "DELETE", "/api/v1/namespaces/a", requestInfo{"delete", "namespaces", "", "a"}},
		{"status patch", "PATCH", "/apis/converge.dev/v1alpha1/namespaces/a/syncs/web/status", requestInfo{"patch", "syncs", "status", "web"}},
		{"create", "POST", "/apis/apps/v1/namespaces/a/deployments", requestInfo{"create", "deployments", "", ""}},
		{"discovery", "GET", "/apis", requestInfo{verb: "get"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := parse(httptest.NewRequest(tt.method, tt.url, nil))
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(requestInfo{})); diff != "" {
				t.Errorf("parse (-want +got):\n%s", diff)
			}
		})
	}
}

type okTransport struct{ calls int }

func (o *okTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	o.calls++
	return &http.Response{StatusCode: 200, Body: http.NoBody, Request: req}, nil
}

func TestRulesInjectThenPass(t *testing.T) {
	next := &okTransport{}
	tr := &Transport{}
	rt := tr.Wrap(next)
	tr.SetRules(Rule{Verb: "patch", Resource: "syncs", Subresource: "status", Times: 2, Status: 409})
	var codes []int
	for i := 0; i < 3; i++ {
		resp, err := rt.RoundTrip(httptest.NewRequest("PATCH", "/apis/converge.dev/v1alpha1/namespaces/a/syncs/web/status", nil))
		if err != nil {
			t.Fatal(err)
		}
		codes = append(codes, resp.StatusCode)
	}
	if diff := cmp.Diff([]int{409, 409, 200}, codes); diff != "" {
		t.Errorf("status codes (-want +got):\n%s", diff)
	}
	if next.calls != 1 || tr.Injected() != 2 || tr.Mutating() != 3 {
		t.Errorf("forwarded %d, injected %d, mutating %d; want 1, 2, 3", next.calls, tr.Injected(), tr.Mutating())
	}
}
