package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/cmd/converge/internal/scheme"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// TestRollbackCommand: converge rollback pins the Sync through spec.rollback to the newest
// Ready revision of its history other than the current one, or to --to; with
// --until-new-revision the pin records the revision the source is at. A Sync with no earlier
// Ready revision and a missing Sync exit 1 saying what to do; -o json prints the pinned Sync.
func TestRollbackCommand(t *testing.T) {
	ns := historyFixture(t) // web: rev2 failed, rev1 Ready before it; fresh: no history
	c, err := client.New(env.Config, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	web := func() *v1alpha1.Sync {
		s := &v1alpha1.Sync{}
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "web"}, s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := web()
	s.Status.LastAttemptedRevision = rev2
	if err := c.Status().Update(context.Background(), s); err != nil {
		t.Fatal(err)
	}

	cliRun(t, "rollback", "-n", ns, "web").expect(t, "the last Ready revision", 0,
		[]string{"sync " + ns + "/web pinned to " + rev1 + " (its source is at " + rev2 + "); converge resume -n " + ns + " web lifts it"}, nil)
	if rb := web().Spec.Rollback; rb == nil || *rb != (v1alpha1.Rollback{Revision: rev1, Until: v1alpha1.RollbackUntilResume}) {
		t.Errorf("spec.rollback %+v, want %s until Resume", rb, rev1)
	}
	cliRun(t, "rollback", "-n", ns, "web", "--to", rev2, "--until-new-revision").expect(t, "--to, until a new revision", 0,
		[]string{"pinned to " + rev2, "the source's next revision lifts it"}, nil)
	if rb := web().Spec.Rollback; rb == nil || *rb != (v1alpha1.Rollback{Revision: rev2, Until: v1alpha1.RollbackUntilNewRevision, From: rev2}) {
		t.Errorf("spec.rollback %+v, want %s until NewRevision from %s", rb, rev2, rev2)
	}
	out, errOut, code := run("rollback", "-n", ns, "web", "--to", rev1, "-o", "json")
	var pinned v1alpha1.Sync
	if err := json.Unmarshal([]byte(out), &pinned); err != nil || code != 0 || errOut != "" ||
		pinned.Spec.Rollback == nil || pinned.Spec.Rollback.Revision != rev1 {
		t.Errorf("rollback -o json: exit %d, %v, stderr %q; want the Sync pinned to %s:\n%s", code, err, errOut, rev1, out)
	}
	if _, errOut, code := run("rollback", "-n", ns, "web", "-o", "wide"); code != 2 || !strings.Contains(errOut, "wide") {
		t.Errorf("rollback -o wide: exit %d, stderr %q; want 2 naming the format", code, errOut)
	}
	cliRun(t, "resume", "-n", ns, "web", "--wait=false").expect(t, "resume lifts the pin", 0, nil,
		[]string{"sync " + ns + "/web: lifted the rollback pin to " + rev1})
	if rb := web().Spec.Rollback; rb != nil {
		t.Errorf("spec.rollback %+v after converge resume, want none", rb)
	}
	cliRun(t, "rollback", "-n", ns, "fresh").expect(t, "no Ready revision", 1, nil,
		[]string{"records no Ready revision", "name one with --to"})
	cliRun(t, "rollback", "-n", ns, "missing").expect(t, "a missing Sync", 1, nil,
		[]string{"sync " + ns + "/missing not found"})
}
