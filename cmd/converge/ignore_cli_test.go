package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/cmd/converge/internal/scheme"
)

// TestApplyIgnoreRules: once another manager changed a field, apply --dry-run finds a
// change (exit 1) without rules and none (exit 0) with --ignore-rules naming the field, and
// an apply with them leaves it; a rule that selects nothing is warned about.
func TestApplyIgnoreRules(t *testing.T) {
	c, ns, apply := appliedThenScaled(t, `{replicas: "3"}`)
	rules := filepath.Join(t.TempDir(), "ignore.yaml")
	if err := os.WriteFile(rules, []byte("- paths: [/data/replicas]\n  target: {kind: ConfigMap}\n- paths: [/spec/replicas]\n  target: {kind: Deployment}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{}
	if out, code := cli(t, append(apply, "--dry-run")...); code != exitCodeChanges {
		t.Errorf("dry-run without rules: exit %d, want %d\n%s", code, exitCodeChanges, out)
	}
	out, code := cli(t, append(apply, "--dry-run", "--ignore-rules", rules)...)
	if code != 0 || !strings.Contains(out, "ignore rule 1 selects no object") {
		t.Errorf("dry-run with rules: exit %d, want 0 and a warning about rule 1\n%s", code, out)
	}
	if out, code := cli(t, append(apply, "--ignore-rules", rules)...); code != 0 {
		t.Fatalf("apply with rules: exit %d\n%s", code, out)
	}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "web"}, cm); err != nil || cm.Data["replicas"] != "7" {
		t.Errorf("web: data %v (%v), want the other manager's replicas 7", cm.Data, err)
	}
}

// TestApplyIgnoreManagers: once another manager changed a field, apply --dry-run with an
// --ignore-rules entry naming that manager finds no change (exit 0) and an apply leaves the
// field as the manager set it; an entry naming Converge's own field manager is an error
// (exit > 1) naming the rule, and nothing is applied.
func TestApplyIgnoreManagers(t *testing.T) {
	c, ns, apply := appliedThenScaled(t, `{replicas: "3", image: v1}`)
	rules, own := filepath.Join(t.TempDir(), "ignore.yaml"), filepath.Join(t.TempDir(), "own.yaml")
	if err := os.WriteFile(rules, []byte("- managers: [autoscaler]\n  target: {kind: ConfigMap}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(own, []byte("- paths: [/data/replicas]\n- managers: [converge]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{}
	if out, code := cli(t, append(apply, "--dry-run", "--ignore-rules", rules)...); code != 0 {
		t.Errorf("dry-run with the manager rule: exit %d, want 0\n%s", code, out)
	}
	cmd := newRootCommand()
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	cmd.SetArgs(append([]string{"--kubeconfig", env.Kubeconfig}, append(apply, "--ignore-rules", own)...))
	if err := cmd.ExecuteContext(context.Background()); err == nil || exitCode(err) <= exitCodeChanges || !strings.Contains(err.Error(), "ignore rule 1") {
		t.Errorf("a rule naming converge: %v, want an error (exit > %d) naming rule 1", err, exitCodeChanges)
	}
	if out, code := cli(t, append(apply, "--ignore-rules", rules)...); code != 0 {
		t.Fatalf("apply with the manager rule: exit %d\n%s", code, out)
	}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "web"}, cm); err != nil || cm.Data["replicas"] != "7" {
		t.Errorf("web: data %v (%v), want the autoscaler's replicas 7", cm.Data, err)
	}
}

// appliedThenScaled applies ConfigMap web with data (YAML flow) into a new namespace with
// converge apply, then sets its data.replicas to 7 as the manager "autoscaler" with a plain
// update. It returns a client, the namespace and the apply's arguments.
func appliedThenScaled(t *testing.T, data string) (client.Client, string, []string) {
	t.Helper()
	ns := env.Namespace(t)
	c, err := client.New(env.Config, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeSet(t, dir, ns, map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\ndata: " + data + "\n"})
	apply := []string{"apply", dir, "-n", ns, "--inventory", ns + "/inv"}
	if out, code := cli(t, apply...); code != 0 {
		t.Fatalf("apply: exit %d\n%s", code, out)
	}
	cm := &corev1.ConfigMap{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "web"}, cm); err != nil {
		t.Fatal(err)
	}
	cm.Data["replicas"] = "7"
	if err := c.Update(context.Background(), cm, client.FieldOwner("autoscaler")); err != nil {
		t.Fatal(err)
	}
	return c, ns, apply
}
