package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/converge-dev/converge/cmd/converge/daemon"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// TestStatusAndReconcileCommands checks `converge reconcile` makes a new commit land although
// the interval is an hour (the request is mirrored to lastHandledRequest), and `converge
// status` lists the Sync Ready at that revision; an unknown Sync is an error.
func TestStatusAndReconcileCommands(t *testing.T) {
	f := newFixture(t)
	rev1 := f.publish(map[string]string{"b.yaml": cmB})
	f.startDaemon(env.Config)
	f.createSync(time.Hour)
	f.waitSync("Ready at the first commit", readyAt(rev1))

	rev2 := f.publish(map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "1", 1)})
	out, code := cli(t, "reconcile", "-n", f.ns, "app", "--timeout", "90s")
	if code != 0 || !strings.Contains(out, rev2) {
		t.Errorf("reconcile: exit %d, output:\n%s\nwant exit 0 and revision %s", code, out, rev2)
	}
	out, code = cli(t, "status", "-n", f.ns)
	if code != 0 || !strings.Contains(out, "app") || !strings.Contains(out, "True") || !strings.Contains(out, rev2) {
		t.Errorf("status: exit %d, output:\n%s", code, out)
	}
	assertHistory(t, f.ns, rev2, rev1)
	if _, code := cli(t, "status", "-n", f.ns, "missing"); code == 0 {
		t.Errorf("status of a missing Sync exited 0")
	}

	// -A and -o json name the replica that wrote the status: the daemon's --replica-name
	// (by default the host name here).
	owner := daemon.DefaultOptions().Replica
	out, code = cli(t, "status", "-A")
	var line string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, f.ns+" ") {
			line = l
		}
	}
	if code != 0 || !strings.Contains(out, "OWNER") || !strings.Contains(line, " "+owner+" ") {
		t.Errorf("status -A: exit %d, want the OWNER column with %q on the line of %s:\n%s", code, owner, f.ns, out)
	}
	out, code = cli(t, "status", "-n", f.ns, "app", "-o", "json")
	if code != 0 || !strings.Contains(out, `"kind": "Sync"`) || !strings.Contains(out, `"owner": "`+owner+`"`) {
		t.Errorf("status -o json: exit %d, want owner %q:\n%s", code, owner, out)
	}
	if out, code := cli(t, "status", "-n", f.ns, "-o", "name"); code != 0 || out != "sync.converge.dev/app\n" {
		t.Errorf("status -o name: exit %d, output %q; want sync.converge.dev/app", code, out)
	}
}

// assertHistory checks `converge history -o json` of the Sync app shows the daemon's
// outcomes: newest Ready at newest with the reconcile's duration, older further down.
func assertHistory(t *testing.T, ns, newest, older string) {
	t.Helper()
	out, code := cli(t, "history", "-n", ns, "app", "-o", "json")
	var h []v1alpha1.HistoryEntry
	if err := json.Unmarshal([]byte(out), &h); err != nil || code != 0 || len(h) < 2 {
		t.Fatalf("history -o json: exit %d, %v; want at least two entries:\n%s", code, err, out)
	}
	if h[0].Revision != newest || h[0].Ready != metav1.ConditionTrue || h[0].Duration == nil || h[0].Count < 1 {
		t.Errorf("newest history entry %+v, want %s Ready with a duration", h[0], newest)
	}
	if !slices.ContainsFunc(h[1:], func(e v1alpha1.HistoryEntry) bool { return e.Revision == older && e.Ready == metav1.ConditionTrue }) {
		t.Errorf("history %+v has no Ready entry of %s", h, older)
	}
}
