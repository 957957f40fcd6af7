package main

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseMixDefaultIsKindPattern(t *testing.T) {
	m, err := parseMix(defaultMix)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(kindPattern[:], []string(m)); diff != "" {
		t.Errorf("default mix (-kindPattern +parsed):\n%s", diff)
	}
	if m.String() != defaultMix {
		t.Errorf("String() = %q, want %q", m.String(), defaultMix)
	}
}

func TestParseMixRefuses(t *testing.T) {
	for _, s := range []string{"", "Service", "Pod=1", "Service=1,Service=2", "Service=-1", "Service=0", "Service=x"} {
		if _, err := parseMix(s); err == nil {
			t.Errorf("parseMix(%q) succeeded", s)
		}
	}
}

// TestGenerateDaemonMix: with -mix Service=1,Deployment=1 the leaves are half Services,
// half Deployments.
func TestGenerateDaemonMix(t *testing.T) {
	m, err := parseMix("Service=1,Deployment=1,ConfigMap=0")
	if err != nil {
		t.Fatal(err)
	}
	w, err := generateDaemon(1000, 10, daemonWorkloadOptions{Mix: m})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, objs := range w.Tenants {
		for _, u := range objs[1:] {
			kinds[u.GetKind()]++
		}
	}
	if diff := cmp.Diff(map[string]int{"Service": 495, "Deployment": 494}, kinds); diff != "" {
		t.Errorf("kinds of the leaves (-want +got):\n%s", diff)
	}
}

func TestPrunedWorkload(t *testing.T) {
	w, err := generateDaemon(1000, 10, daemonWorkloadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, n := prunedWorkload(w, 0.1)
	if n != 99 {
		t.Errorf("dropped %d leaves, want 99 (10%% of 989)", n)
	}
	if got, want := p.tenantObjects(), w.tenantObjects()-n; got != want {
		t.Errorf("%d objects left, want %d", got, want)
	}
	for i, objs := range p.Tenants {
		if objs[0].GetKind() != "Namespace" {
			t.Errorf("tenant %d lost its Namespace", i)
		}
	}
}

func TestParseScenarios(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  bool
	}{
		{in: "one,many,chart", want: []string{"one", "many", "chart"}},
		{in: "chart, one", want: []string{"one", "chart"}},
		{in: "both", want: []string{"one", "many"}},
		{in: "both,chart", want: []string{"one", "many", "chart"}},
		{in: "helm", err: true},
	} {
		got, err := parseScenarios(tc.in)
		if (err != nil) != tc.err || !slices.Equal(got, tc.want) {
			t.Errorf("parseScenarios(%q) = %v, %v; want %v (error %v)", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// TestScenarioFilesDistinct: each scenario's daemon has its own log, heap profile and git
// cache, though two scenarios have one Sync each.
func TestScenarioFilesDistinct(t *testing.T) {
	w, err := generateDaemon(100, 10, daemonWorkloadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b := &daemonBench{work: w}
	seen := map[string]string{}
	for _, sc := range b.scenarios([]string{scenarioOne, scenarioMany, scenarioChart}) {
		name := sc.fileName("daemon", 0, ".log")
		if other, ok := seen[name]; ok {
			t.Errorf("scenarios %q and %q both write %s", other, sc.name, name)
		}
		seen[name] = sc.name
	}
	if _, ok := seen["daemon-1-1-syncs.log"]; !ok {
		t.Errorf("the single Sync's log is no longer daemon-1-1-syncs.log: %v", seen)
	}
}
