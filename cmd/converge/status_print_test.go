package main

import (
	"bytes"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// TestStatusOutputs checks the layouts of `converge status` against golden files: the plain
// table has no OWNER, -A and -o wide add it ("<none>" for a Sync no replica has written yet),
// and -o json and yaml carry the owner. Before, no layout showed the owner.
func TestStatusOutputs(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	sync := func(ns, name, owner string, ready metav1.ConditionStatus, msg string) v1alpha1.Sync {
		s := v1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Generation: 1,
			CreationTimestamp: metav1.NewTime(now.Add(-90 * time.Minute))}}
		if ready == "" {
			return s
		}
		s.Status = v1alpha1.SyncStatus{ObservedGeneration: 1, Owner: owner,
			LastAppliedRevision: "main@sha1:0123456789012345678901234567890123456789",
			Conditions:          []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: ready, Reason: "Applied", Message: msg}}}
		return s
	}
	items := func() []v1alpha1.Sync {
		return []v1alpha1.Sync{
			sync("team-b", "web", "converge-7d9f8-x2k4p", metav1.ConditionTrue, "applied 3 objects"),
			sync("team-a", "new", "", "", ""),
			sync("team-a", "api", "converge-7d9f8-qq5rz", metav1.ConditionFalse, "Deployment/team-a/api: not ready\nsecond line"),
		}
	}
	for _, tc := range []struct {
		golden string
		view   statusView
	}{
		{"status-table.txt", statusView{}},
		{"status-all-namespaces.txt", statusView{AllNamespaces: true}},
		{"status-wide.txt", statusView{Output: "wide"}},
		{"status.json", statusView{Output: "json"}},
		{"status.yaml", statusView{Output: "yaml"}},
	} {
		tc.view.Now = now
		var out bytes.Buffer
		if err := printSyncs(&out, items(), tc.view); err != nil {
			t.Fatalf("%s: %v", tc.golden, err)
		}
		golden(t, tc.golden, "NS-unused", out.String())
	}
}
