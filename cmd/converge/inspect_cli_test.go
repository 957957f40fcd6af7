package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/cmd/converge/internal/scheme"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// inspectFixture is a daemon reconciling the Sync "app" of ConfigMaps a (version 1, a.yaml)
// and b (b.yaml), Ready at rev; the CLI's git cache is the test's own.
func inspectFixture(t *testing.T) (*fixture, string) {
	t.Helper()
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	f := newFixture(t)
	rev := f.publish(map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "1", 1), "b.yaml": cmB})
	f.startDaemon(env.Config)
	f.createSync(time.Hour)
	f.waitSync("Ready at the first commit", readyAt(rev))
	return f, rev
}

// TestTreeCommand checks `converge tree` lists the Sync's two ConfigMaps, Current, each with
// the file of the source it came from, as a table and as JSON; --files=false leaves
// FILE out without a fetch.
func TestTreeCommand(t *testing.T) {
	f, _ := inspectFixture(t)
	out, errOut, code := run("tree", "--allow-local-git", "-n", f.ns, "app")
	if code != 0 || errOut != "" {
		t.Fatalf("tree: exit %d, stderr %q", code, errOut)
	}
	// The table's column widths follow the namespace's length: compare the cells.
	wantTable := [][]string{
		{"KIND", "NAMESPACE/NAME", "HEALTH", "FILE", "MESSAGE"},
		{"ConfigMap", f.ns + "/a", "Current", "a.yaml:1", "Resource", "is", "always", "ready"},
		{"ConfigMap", f.ns + "/b", "Current", "b.yaml:1", "Resource", "is", "always", "ready"},
	}
	var table [][]string
	for l := range strings.Lines(out) {
		table = append(table, strings.Fields(l))
	}
	if diff := cmp.Diff(wantTable, table); diff != "" {
		t.Errorf("tree table (-want +got):\n%s\n%s", diff, out)
	}

	out, errOut, code = run("tree", "--allow-local-git", "-n", f.ns, "app", "-o", "json")
	var rows []treeObject
	if err := json.Unmarshal([]byte(out), &rows); err != nil || code != 0 || errOut != "" {
		t.Fatalf("tree -o json: exit %d, %v, stderr %q:\n%s", code, err, errOut, out)
	}
	want := []treeObject{
		{Kind: "ConfigMap", Namespace: f.ns, Name: "a", Health: "Current", Message: "Resource is always ready", File: "a.yaml:1"},
		{Kind: "ConfigMap", Namespace: f.ns, Name: "b", Health: "Current", Message: "Resource is always ready", File: "b.yaml:1"},
	}
	if len(rows) != 2 || rows[0] != want[0] || rows[1] != want[1] {
		t.Errorf("tree -o json:\n%+v\nwant\n%+v", rows, want)
	}
	// The Sync's URL is on loopback: refused without --allow-local-git, as by the daemon.
	out, errOut, code = run("tree", "-n", f.ns, "app", "-o", "json")
	rows = nil
	if err := json.Unmarshal([]byte(out), &rows); err != nil || code != 0 || len(rows) != 2 || rows[0].File != "" ||
		!strings.Contains(errOut, "warning: FILE left empty") || !strings.Contains(errOut, "--allow-local-git") {
		t.Errorf("tree of a loopback source without --allow-local-git: exit %d, %v, stderr %q; want rows without FILE and why:\n%s", code, err, errOut, out)
	}
	if _, errOut, code := run("diff", "-n", f.ns, "app"); code != 2 || !strings.Contains(errOut, "--allow-local-git") {
		t.Errorf("diff of a loopback source without --allow-local-git: exit %d, stderr %q; want 2 and the flag named", code, errOut)
	}

	out, _, code = run("tree", "-n", f.ns, "app", "-o", "yaml", "--files=false")
	rows = nil
	if err := yaml.Unmarshal([]byte(out), &rows); err != nil || code != 0 || len(rows) != 2 || rows[0].File != "" || rows[0].Health != "Current" {
		t.Errorf("tree -o yaml --files=false: exit %d, %v; want two rows without FILE:\n%s", code, err, out)
	}
}

// TestTreeShowsDrift checks that `converge tree` of a Sync that reports drift
// (spec.driftPolicy: Report) shows the field an edit changed and the manager that changed it,
// in a DRIFT column and the JSON, and nothing for the object left alone.
func TestTreeShowsDrift(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	f := newFixture(t)
	rev := f.publish(map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "1", 1), "b.yaml": cmB})
	f.startDaemon(env.Config)
	f.createSync(time.Hour, func(s *v1alpha1.Sync) { s.Spec.DriftPolicy = v1alpha1.DriftReport })
	f.waitSync("Ready at the first commit", readyAt(rev))
	edit := client.RawPatch(types.MergePatchType, []byte(`{"data":{"version":"edited"}}`))
	if err := f.c.Patch(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "a"}}, edit,
		client.FieldOwner("kubectl-edit")); err != nil {
		t.Fatal(err)
	}
	f.waitSync("the edit reported as drift", func(s *v1alpha1.Sync) bool { return s.Status.Drift != nil && len(s.Status.Drift.Objects) == 1 })

	out, errOut, code := run("tree", "-n", f.ns, "app", "--files=false", "-o", "json")
	var rows []treeObject
	if err := json.Unmarshal([]byte(out), &rows); err != nil || code != 0 {
		t.Fatalf("tree -o json: exit %d, %v, stderr %q:\n%s", code, err, errOut, out)
	}
	got := map[string]string{}
	for _, r := range rows {
		got[r.Name] = r.Drift
	}
	if want := map[string]string{"a": "data.version (kubectl-edit)", "b": ""}; !cmp.Equal(want, got) {
		t.Errorf("drift by object %v, want %v", got, want)
	}
	out, _, code = run("tree", "-n", f.ns, "app", "--files=false")
	if code != 0 || !strings.Contains(out, "DRIFT") || !strings.Contains(out, "data.version (kubectl-edit)") {
		t.Errorf("tree table: exit %d, want a DRIFT column naming the field and its manager:\n%s", code, out)
	}
}

// TestEventsCommand checks `converge events` prints the daemon's event about the Sync and an
// event about one of its ConfigMaps, oldest first, and leaves out the event of a ConfigMap the
// Sync does not own. The ConfigMap's event, an hour old, comes first.
func TestEventsCommand(t *testing.T) {
	f, _ := inspectFixture(t)
	earlier := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	for _, about := range []string{"a", "stranger"} {
		ev := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Namespace: f.ns, Name: "edited-" + about},
			InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "ConfigMap", Namespace: f.ns, Name: about},
			Reason:         "Edited", Message: "edited " + about, Type: corev1.EventTypeNormal,
			FirstTimestamp: earlier, LastTimestamp: earlier, Count: 2,
		}
		if err := f.c.Create(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
	var rows []eventRow
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		out, _, code := run("events", "-n", f.ns, "app", "-o", "json")
		rows = nil
		return code == 0 && json.Unmarshal([]byte(out), &rows) == nil && len(rows) >= 2 && rows[len(rows)-1].Reason == "Applied", nil
	})
	if err != nil {
		t.Fatalf("events -o json never listed the Sync's Applied event last: %+v", rows)
	}
	first := rows[0]
	if first.Object.Kind != "ConfigMap" || first.Object.Name != "a" || first.Reason != "Edited" || first.Count != 2 || !first.LastSeen.Equal(&earlier) {
		t.Errorf("the first event is %+v; want ConfigMap a's Edited, seen %s", first, earlier)
	}
	for _, r := range rows {
		if r.Object.Name == "stranger" {
			t.Errorf("events lists the event of a ConfigMap the Sync does not own: %+v", r)
		}
		if r.Object.Kind == "Sync" && (r.Object.Name != "app" || r.Type != corev1.EventTypeNormal) {
			t.Errorf("unexpected Sync event %+v", r)
		}
	}
	out, errOut, code := run("events", "-n", f.ns, "app")
	if code != 0 || errOut != "" || !strings.HasPrefix(out, "LAST SEEN") || !strings.Contains(out, "Sync/app") || strings.Contains(out, "<invalid>") ||
		!strings.Contains(out, "ConfigMap/a") || strings.Contains(out, "stranger") {
		t.Errorf("events: exit %d, stderr %q:\n%s", code, errOut, out)
	}
}

// TestSuspendTraceDiffResume checks a round trip: suspend sets spec.suspend; an edit by
// another field manager then stays, and trace names the Sync, its revision, file and both
// managers; diff exits 0 before the edit and 1 after it, naming the ConfigMap; diff --latest
// shows the prune a commit made while suspended brings; resume lifts spec.suspend and its
// reconcile applies that commit and corrects the edit, after which diff exits 0 again.
func TestSuspendTraceDiffResume(t *testing.T) {
	f, rev := inspectFixture(t)
	ctx := context.Background()
	if out, errOut, code := run("diff", "--allow-local-git", "-n", f.ns, "app"); code != 0 || errOut != "" {
		t.Errorf("diff of a Sync in step: exit %d, stderr %q; want 0:\n%s", code, errOut, out)
	}

	out, errOut, code := run("suspend", "-n", f.ns, "app", "-o", "json")
	var s v1alpha1.Sync
	if err := json.Unmarshal([]byte(out), &s); err != nil || code != 0 || errOut != "" || !s.Spec.Suspend {
		t.Fatalf("suspend -o json: exit %d, %v, stderr %q:\n%s", code, err, errOut, out)
	}
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "app"}, &s); err != nil || !s.Spec.Suspend {
		t.Fatalf("after suspend, spec.suspend=%v (%v)", s.Spec.Suspend, err)
	}

	cm := &corev1.ConfigMap{}
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "a"}, cm); err != nil {
		t.Fatal(err)
	}
	cm.Data["version"] = "edited"
	if err := f.c.Update(ctx, cm, client.FieldOwner("kubectl-edit")); err != nil {
		t.Fatal(err)
	}

	out, errOut, code = run("trace", "--allow-local-git", "-n", f.ns, "configmap/a")
	for _, want := range []string{"Object:", "ConfigMap/a", "Sync:", f.ns + "/app", "Inventoried:", "Revision:", rev,
		"File:", "a.yaml:1", "Field managers:", "kubectl-edit (Update", "data.version", "converge (Apply"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("trace: exit %d, stderr %q; want %q in:\n%s", code, errOut, want, out)
			break
		}
	}
	out, _, code = run("trace", "--allow-local-git", "-n", f.ns, "ConfigMap/a", "-o", "json", "--files=false")
	var tr traceResult
	if err := json.Unmarshal([]byte(out), &tr); err != nil || code != 0 || tr.Sync == nil || tr.Sync.Name != "app" ||
		!tr.Sync.Suspended || tr.Revision != rev || tr.Inventoried == nil || !*tr.Inventoried || len(tr.FieldManagers) < 2 ||
		!hasManager(tr.FieldManagers, "kubectl-edit", "data.version") || tr.Source == nil || tr.Source.Ref != "branch:main" {
		t.Errorf("trace -o json: exit %d, %v:\n%s", code, err, out)
	}

	out, errOut, code = run("diff", "--allow-local-git", "-n", f.ns, "app")
	if code != exitCodeChanges || !strings.Contains(out, "ConfigMap/"+f.ns+"/a") || !strings.Contains(out, "edited") {
		t.Errorf("diff after an edit: exit %d, stderr %q; want exit 1 and the ConfigMap's diff:\n%s", code, errOut, out)
	}
	out, _, code = run("diff", "--allow-local-git", "-n", f.ns, "app", "-o", "json")
	var rep report
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != exitCodeChanges || rep.Summary.Configured != 1 || rep.Revision != rev {
		t.Errorf("diff -o json: exit %d, %v; want 1 configured at %s:\n%s", code, err, rev, out)
	}

	// A commit made while suspended: diff stays at the applied revision; --latest shows what
	// the next reconcile does, b pruned from the inventory.
	rev2 := f.publish(map[string]string{"b.yaml": ""})
	out, _, code = run("diff", "--allow-local-git", "-n", f.ns, "app", "-o", "json", "--latest")
	rep = report{}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != exitCodeChanges || rep.Revision != rev2 ||
		rep.Summary.Pruned != 1 || len(rep.Pruned) != 1 || rep.Pruned[0].Name != "b" || rep.Summary.Configured != 1 {
		t.Errorf("diff --latest: exit %d, %v; want b pruned and a configured at %s:\n%s", code, err, rev2, out)
	}
	if _, err := f.configMap("b"); err != nil {
		t.Errorf("diff --latest deleted b: %v", err)
	}

	out, errOut, code = run("resume", "-n", f.ns, "app", "--timeout", "90s")
	if code != 0 || !strings.Contains(out, "False") || !strings.Contains(out, rev2) {
		t.Errorf("resume: exit %d, stderr %q; want Ready at %s:\n%s", code, errOut, rev2, out)
	}
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "app"}, &s); err != nil || s.Spec.Suspend || s.Status.LastHandledRequest == "" {
		t.Errorf("after resume: spec.suspend=%v, lastHandledRequest %q (%v)", s.Spec.Suspend, s.Status.LastHandledRequest, err)
	}
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "a"}, cm); err != nil || cm.Data["version"] != "1" {
		t.Errorf("after resume the edit stays: version %q (%v)", cm.Data["version"], err)
	}
	if out, errOut, code := run("diff", "--allow-local-git", "-n", f.ns, "app"); code != 0 {
		t.Errorf("diff after resume: exit %d, stderr %q; want 0:\n%s", code, errOut, out)
	}
}

// TestTraceUnowned checks trace of an object no inventory owns and of one that does not
// exist: exit 1 and a message that says which.
func TestTraceUnowned(t *testing.T) {
	installSyncCRD(t)
	ns := env.Namespace(t)
	c, err := client.New(env.Config, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	loose := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "loose"}, Data: map[string]string{"k": "v"}}
	if err := c.Create(context.Background(), loose, client.FieldOwner("kubectl-create")); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := run("trace", "-n", ns, "cm/loose")
	if code != 1 || out != "" || !strings.Contains(errOut, "ConfigMap "+ns+"/loose is not managed by Converge") ||
		!strings.Contains(errOut, "kubectl-create") {
		t.Errorf("trace of an unowned object: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, errOut, code = run("trace", "-n", ns, "configmaps/gone")
	if code != 1 || out != "" || !strings.Contains(errOut, "ConfigMap gone not found in namespace "+ns) {
		t.Errorf("trace of a missing object: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, errOut, code := run("trace", "-n", ns, "loose"); code != 2 || !strings.Contains(errOut, "KIND/NAME") {
		t.Errorf("trace without a kind: exit %d, stderr %q", code, errOut)
	}
}

// TestDiffRefusesSourceItCannotRender checks diff of a Sync whose source the CLI does not
// render (an OCI artifact) exits 2 and says how to render it by hand, and tree lists its
// objects without FILE, saying why.
func TestDiffRefusesSourceItCannotRender(t *testing.T) {
	installSyncCRD(t)
	ns := env.Namespace(t)
	c, err := client.New(env.Config, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	s := &v1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "oci"},
		Spec: v1alpha1.SyncSpec{Source: v1alpha1.Source{OCI: &v1alpha1.OCISource{URL: "oci://registry.example/app"}}}}
	if err := c.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := run("diff", "-n", ns, "oci")
	if code != 2 || out != "" || !strings.Contains(errOut, "sync "+ns+"/oci: the CLI renders the git sources of Syncs") ||
		!strings.Contains(errOut, "converge apply --dry-run") {
		t.Errorf("diff of an OCI Sync: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, errOut, code = run("tree", "-n", ns, "oci")
	if code != 0 || out != "" || errOut != "Sync "+ns+"/oci owns no objects.\n" {
		t.Errorf("tree of a Sync without objects: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestInspectionVerbsMissingSync checks each verb about one Sync names the namespace it
// searched and how to list the Syncs; diff exits 2 (1 means differences), the others 1.
func TestInspectionVerbsMissingSync(t *testing.T) {
	installSyncCRD(t)
	ns := env.Namespace(t)
	for verb, wantCode := range map[string]int{"tree": 1, "events": 1, "suspend": 1, "resume": 1, "diff": 2} {
		out, errOut, code := run(verb, "-n", ns, "missing")
		want := "sync " + ns + "/missing not found; converge status -n " + ns + " lists the Syncs of " + ns + " (-A of every namespace)"
		if code != wantCode || out != "" || !strings.Contains(errOut, want) {
			t.Errorf("%s of a missing Sync: exit %d, stdout %q, stderr %q; want exit %d and %q", verb, code, out, errOut, wantCode, want)
		}
	}
}

// hasManager reports whether ms has the manager name owning field.
func hasManager(ms []fieldManager, name, field string) bool {
	for _, m := range ms {
		if m.Manager == name && slices.Contains(m.Fields, field) {
			return true
		}
	}
	return false
}

// TestInspectionVerbsRenderBuildFields checks diff, tree and trace render a Sync with
// spec.namePrefix and spec.commonMetadata as the daemon applies it: diff finds nothing to
// change, tree and trace find the prefixed objects in the render and name its file (the
// generated kustomization, as the daemon's messages do). Without them, diff showed the
// unprefixed ConfigMaps as created and the daemon's as pruned (exit 1), tree's FILE was
// <none> and trace named no file.
func TestInspectionVerbsRenderBuildFields(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	f := newFixture(t)
	rev := f.publish(map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "1", 1), "b.yaml": cmB})
	f.startDaemon(env.Config)
	f.createSync(time.Hour, func(s *v1alpha1.Sync) {
		s.Spec.BuildFields.NamePrefix = "p-"
		s.Spec.CommonMetadata = &v1alpha1.CommonMetadata{Labels: map[string]string{"team": "blue"}}
	})
	f.waitSync("Ready at the first commit", readyAt(rev))
	if cm, err := f.configMap("p-a"); err != nil || cm.Labels["team"] != "blue" {
		t.Fatalf("the daemon's p-a: labels %v (%v)", cm.Labels, err)
	}
	if out, errOut, code := run("diff", "--allow-local-git", "-n", f.ns, "app"); code != 0 || errOut != "" {
		t.Errorf("diff of a Sync with build fields, in step: exit %d, stderr %q; want 0:\n%s", code, errOut, out)
	}
	out, errOut, code := run("tree", "--allow-local-git", "-n", f.ns, "app")
	if code != 0 || !strings.Contains(out, f.ns+"/p-a") || strings.Contains(out, "<none>") || !strings.Contains(out, "kustomization.yaml") {
		t.Errorf("tree: exit %d, stderr %q; want p-a and p-b from kustomization.yaml:\n%s", code, errOut, out)
	}
	out, errOut, code = run("trace", "--allow-local-git", "-n", f.ns, "configmap/p-b")
	if code != 0 || !strings.Contains(out, "File:             kustomization.yaml") {
		t.Errorf("trace: exit %d, stderr %q; want p-b from kustomization.yaml:\n%s", code, errOut, out)
	}
}

// TestTreeShowsCorrectedDrift checks that `converge tree` of a Sync that corrects drift (the
// default policy) shows, from its newest DriftCorrected event, the field an edit changed and
// the manager that changed it, marked as corrected, and nothing for the object left alone.
// Without it: drift taken back was in the event's message only.
func TestTreeShowsCorrectedDrift(t *testing.T) {
	f, _ := inspectFixture(t)
	edit := client.RawPatch(types.MergePatchType, []byte(`{"data":{"version":"edited"}}`))
	if err := f.c.Patch(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "a"}}, edit,
		client.FieldOwner("kubectl-edit")); err != nil {
		t.Fatal(err)
	}
	var rows []treeObject
	var out, errOut string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		var code int
		out, errOut, code = run("tree", "-n", f.ns, "app", "--files=false", "-o", "json")
		rows = nil
		if code != 0 || json.Unmarshal([]byte(out), &rows) != nil {
			return false, nil
		}
		return slices.ContainsFunc(rows, func(r treeObject) bool { return r.DriftCorrected != nil }), nil
	})
	if err != nil {
		t.Fatalf("tree never showed corrected drift: stderr %q:\n%s", errOut, out)
	}
	for _, r := range rows {
		switch {
		case r.Name == "a" && (!strings.HasPrefix(r.Drift, "corrected ") || !strings.HasSuffix(r.Drift, " ago: data.version (kubectl-edit)")):
			t.Errorf("a: drift %q, want it corrected, naming data.version and kubectl-edit", r.Drift)
		case r.Name == "b" && (r.Drift != "" || r.DriftCorrected != nil):
			t.Errorf("b drifted: %q", r.Drift)
		}
	}
	out, _, code := run("tree", "-n", f.ns, "app", "--files=false")
	if code != 0 || !strings.Contains(out, "DRIFT") || !strings.Contains(out, "data.version (kubectl-edit)") {
		t.Errorf("tree table: exit %d, want a DRIFT column naming the corrected field:\n%s", code, out)
	}
}

// TestPrintableDrift: control characters in a drift's text (a field manager's name is any
// client's choice) are printed as escapes, never sent to the terminal.
func TestPrintableDrift(t *testing.T) {
	if got, want := printable("data.v (evil\x1b]0;x\x07)"), `data.v (evil\x1b]0;x\a)`; got != want {
		t.Errorf("printable: %q, want %q", got, want)
	}
	if got := printable("spec.replicas (kubectl-scale), ü"); got != "spec.replicas (kubectl-scale), ü" {
		t.Errorf("printable changed printable text: %q", got)
	}
}
