package main

import (
	"strings"
	"testing"
	"time"

	"github.com/converge-dev/converge/cmd/converge/daemon"
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
