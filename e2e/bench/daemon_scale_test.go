package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestShardsSpread(t *testing.T) {
	m := func(shards, held int) *daemonMetrics { return &daemonMetrics{Shards: shards, ShardsHeld: held} }
	for _, tc := range []struct {
		name string
		ms   []*daemonMetrics
		want bool
	}{
		{"one replica, all", []*daemonMetrics{m(64, 64)}, true},
		{"one replica, some", []*daemonMetrics{m(64, 60)}, false},
		{"three at their fair share, the last with the rest", []*daemonMetrics{m(64, 22), m(64, 22), m(64, 20)}, true},
		{"one still without its share", []*daemonMetrics{m(64, 32), m(64, 22), m(64, 10)}, false},
		{"a shard still held by the dead", []*daemonMetrics{m(64, 22), nil, m(64, 22)}, false},
		{"the dead one's shards taken", []*daemonMetrics{m(64, 32), nil, m(64, 32)}, true},
		{"not sharded", []*daemonMetrics{m(-1, -1), m(-1, -1)}, true},
	} {
		if got, desc := shardsSpread(tc.ms); got != tc.want {
			t.Errorf("%s: shardsSpread = %v (%s), want %v", tc.name, got, desc, tc.want)
		}
	}
}

func TestParseServerRequests(t *testing.T) {
	text := `apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="configmaps",scope="resource",subresource="",verb="GET",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 40
apiserver_request_total{code="200",component="apiserver",dry_run="All",group="",resource="configmaps",scope="resource",subresource="",verb="APPLY",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="",scope="",subresource="/healthz",verb="GET",version=""} 9
`
	got, err := parseServerRequests(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	want := serverRequests{Requests: Counts{"get": 7, "patch": 2, "dryRun": 2}, Leases: 40,
		ByResource: map[string]int{"get configmaps": 7, "patch configmaps": 2}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parseServerRequests (-want +got):\n%s", diff)
	}
}
