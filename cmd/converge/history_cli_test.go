package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/cmd/converge/internal/scheme"
	"github.com/converge-dev/converge/cmd/converge/internal/synctest"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// historyFixture creates the Sync web with two history entries as the status writer records
// them (rev2 failing its health checks, rev1 applied before it) and the Sync fresh with none,
// and sets the clock the ages are read against to an hour after the newest entry.
func historyFixture(t *testing.T) string {
	t.Helper()
	installSyncCRD(t)
	ns := env.Namespace(t)
	c, err := client.New(env.Config, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	at := func(min int) metav1.Time {
		return metav1.NewTime(time.Date(2026, 11, 23, 12, min, 0, 0, time.UTC))
	}
	for _, name := range []string{"web", "fresh"} {
		s := synctest.NewSync(ns, "https://git.example/app.git", time.Hour, func(s *v1alpha1.Sync) { s.Name = name })
		synctest.Create(t, c, s)
		if name == "fresh" {
			continue
		}
		s.Status.History = []v1alpha1.HistoryEntry{
			{Revision: rev2, Digest: "sha1:2222222222222222222222222222222222222222", Generation: 2, Ready: metav1.ConditionFalse,
				Reason: "HealthCheckFailed", Message: "Deployment NS/api: not ready after 3m0s\nsecond line",
				Summary: &v1alpha1.Summary{Configured: 1, Unchanged: 4, NotReady: 1}, Duration: &metav1.Duration{Duration: 2345 * time.Millisecond},
				FirstSeen: at(10), LastSeen: at(30), Count: 3},
			{Revision: rev1, Digest: "sha1:1111111111111111111111111111111111111111", Generation: 1, Ready: metav1.ConditionTrue,
				Reason: "ReconciliationSucceeded", Message: "Applied revision " + rev1,
				Summary: &v1alpha1.Summary{Created: 5}, FirstSeen: at(0), LastSeen: at(0), Count: 1},
		}
		if err := c.Status().Update(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	now := at(30).Add(time.Hour)
	clock = func() time.Time { return now }
	t.Cleanup(func() { clock = time.Now })
	return ns
}

// TestHistoryCommand checks `converge history` prints a Sync's history newest first as a
// table (golden), and as JSON and YAML lists a program reads; a Sync with no history prints
// nothing and says so; a missing Sync exits 1 with an error naming it.
func TestHistoryCommand(t *testing.T) {
	ns := historyFixture(t)
	out, errOut, code := run("history", "-n", ns, "web")
	if code != 0 || errOut != "" {
		t.Errorf("history: exit %d, stderr %q", code, errOut)
	}
	golden(t, "history-table.txt", ns, out)

	for _, format := range []string{"json", "yaml"} {
		out, errOut, code := run("history", "-n", ns, "web", "-o", format)
		var h []v1alpha1.HistoryEntry
		var err error
		if format == "json" {
			err = json.Unmarshal([]byte(out), &h)
		} else {
			err = yaml.Unmarshal([]byte(out), &h)
		}
		if err != nil || code != 0 || errOut != "" || len(h) != 2 || h[0].Revision != rev2 || h[0].Count != 3 ||
			h[1].Revision != rev1 || h[1].Summary == nil || h[1].Summary.Created != 5 {
			t.Errorf("-o %s: exit %d, %v, stderr %q; want the two entries, rev2 first:\n%s", format, code, err, errOut, out)
		}
	}

	out, errOut, code = run("history", "-n", ns, "fresh")
	if code != 0 || out != "" || errOut != "No history for sync "+ns+"/fresh yet.\n" {
		t.Errorf("history of a Sync without one: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if out, _, code := run("history", "-n", ns, "fresh", "-o", "json"); code != 0 || out != "[]\n" {
		t.Errorf("-o json of a Sync without history: exit %d, %q; want []", code, out)
	}

	out, errOut, code = run("history", "-n", ns, "missing")
	if code != 1 || out != "" || !strings.Contains(errOut, "sync "+ns+"/missing not found") {
		t.Errorf("history of a missing Sync: exit %d, stdout %q, stderr %q; want exit 1 and an error naming it", code, out, errOut)
	}
	if _, errOut, code := run("history", "web", "--kubeconfig", unreachableKubeconfig(t)); code != 2 || !strings.Contains(errOut, "cannot reach the cluster") {
		t.Errorf("history on an unreachable cluster: exit %d, stderr %q; want exit 2 and what to check", code, errOut)
	}
	if _, errOut, code := run("history", "-n", ns, "web", "-o", "wide"); code != 2 || !strings.Contains(errOut, "allowed formats are table, json, yaml") {
		t.Errorf("-o wide: exit %d, stderr %q; want exit 2 and the allowed formats", code, errOut)
	}
}
