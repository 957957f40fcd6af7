package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseSample(t *testing.T) {
	for _, tc := range []struct {
		name   string
		in     string
		labels map[string]string
		value  float64
		ok     bool
	}{
		{name: "apply dry-run", in: `{code="201",component="apiserver",dry_run="All",group="",resource="configmaps",verb="APPLY"} 1000`,
			labels: map[string]string{"code": "201", "component": "apiserver", "dry_run": "All", "group": "", "resource": "configmaps", "verb": "APPLY"},
			value:  1000, ok: true},
		{name: "escaped quote", in: `{a="x\"y",b=""} 2.5e+03`, labels: map[string]string{"a": `x"y`, "b": ""}, value: 2500, ok: true},
		{name: "no value", in: `{a="x"}`, ok: false},
		{name: "not a sample", in: `apiserver_request_total 3`, ok: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			labels, value, ok := parseSample(tc.in)
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v", ok, tc.ok)
			}
			if !ok {
				return
			}
			if diff := cmp.Diff(tc.labels, labels); diff != "" {
				t.Errorf("labels (-want +got):\n%s", diff)
			}
			if value != tc.value {
				t.Errorf("value = %v, want %v", value, tc.value)
			}
		})
	}
}

func TestIsDiscovery(t *testing.T) {
	for path, want := range map[string]bool{
		"/api": true, "/api/v1": true, "/apis": true, "/apis/apps": true, "/apis/apps/v1": true, "/openapi/v3": true,
		"/api/v1/namespaces":                     false,
		"/api/v1/namespaces/a/configmaps/b":      false,
		"/apis/bench.converge.dev/v1/namespaces": false,
	} {
		if got := isDiscovery(path); got != want {
			t.Errorf("isDiscovery(%q) = %v, want %v", path, got, want)
		}
	}
}
