package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/cmd/converge/internal/scheme"
	"github.com/converge-dev/converge/e2e/cluster"
)

// cliResult is one command as a user types it: its stdout, its stderr (with the "Error: ..."
// line main prints) and its exit code.
type cliResult struct {
	stdout, stderr string
	code           int
}

// cliRun runs converge with args in-process, as main does.
func cliRun(t *testing.T, args ...string) cliResult {
	t.Helper()
	cmd := newRootCommand()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetIn(strings.NewReader(""))
	cmd.SetArgs(append([]string{"--kubeconfig", env.Kubeconfig}, args...))
	r := cliResult{}
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		if !errors.Is(err, errChangesFound) {
			errOut.WriteString("Error: " + err.Error() + "\n")
		}
		r.code = exitCode(err)
	}
	r.stdout, r.stderr = out.String(), errOut.String()
	return r
}

// expect fails t unless r exited with code and its stdout and stderr contain the strings.
func (r cliResult) expect(t *testing.T, what string, code int, stdout, stderr []string) {
	t.Helper()
	if testing.Verbose() { // for reading the wording
		t.Logf("%s: exit %d\nstdout:\n%s\nstderr:\n%s", what, r.code, r.stdout, r.stderr)
	}
	ok := r.code == code
	for _, s := range stdout {
		ok = ok && strings.Contains(r.stdout, s)
	}
	for _, s := range stderr {
		ok = ok && strings.Contains(r.stderr, s)
	}
	if !ok {
		t.Errorf("%s: exit code %d (want %d), want stdout containing %q and stderr containing %q; got\nstdout:\n%s\nstderr:\n%s",
			what, r.code, code, stdout, stderr, r.stdout, r.stderr)
	}
}

// setDir is a fresh folder holding files (content "NS" is the namespace).
func setDir(t *testing.T, ns string, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "set")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeSet(t, dir, ns, files)
	return dir
}

func testClient(t *testing.T) client.Client {
	t.Helper()
	c, err := client.New(env.Config, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// cmNamed is a ConfigMap name in NS with data a: "1".
func cmNamed(name string) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: " + name + ", namespace: NS}\ndata: {a: \"1\"}\n"
}

// TestApplyCLIInventoryNamedAfterItsOwnObject: an inventory named after a ConfigMap of its
// own set is refused before anything is written, naming the object and what to do; the
// ConfigMap is not created and a later run with another name applies.
func TestApplyCLIInventoryNamedAfterItsOwnObject(t *testing.T) {
	cluster.Require(t, env)
	ns := env.Namespace(t)
	dir := setDir(t, ns, map[string]string{"one.yaml": cmNamed("one"), "two.yaml": cmNamed("two")})
	r := cliRun(t, "apply", dir, "--inventory", ns+"/two")
	r.expect(t, "apply --inventory NS/two", 2, nil, []string{
		"ConfigMap " + ns + "/two of the set has the name of its own inventory " + ns + "/two",
		"choose another inventory name",
	})
	if strings.Contains(r.stdout, "configured") || strings.Contains(r.stdout, "created") {
		t.Errorf("refused run reported applied objects:\n%s", r.stdout)
	}
	c := testClient(t)
	for _, name := range []string{"one", "two"} {
		err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &corev1.ConfigMap{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("ConfigMap %s after the refused run: %v, want not found (nothing written)", name, err)
		}
	}
	cliRun(t, "apply", dir, "--inventory", ns+"/two-set").expect(t, "apply --inventory NS/two-set", 0, []string{"created"}, nil)
}

// TestApplyCLIAllowEmpty: a folder emptied of its objects prunes the whole set with --prune
// --allow-empty (as a Sync's spec.allowEmpty), within --prune-budget; without --allow-empty
// it is refused, saying which flag allows it, and nothing is pruned.
func TestApplyCLIAllowEmpty(t *testing.T) {
	cluster.Require(t, env)
	ns := env.Namespace(t)
	dir := setDir(t, ns, map[string]string{"one.yaml": cmNamed("one"), "two.yaml": cmNamed("two")})
	inv := []string{"--inventory", ns + "/app", "--prune"}
	cliRun(t, append([]string{"apply", dir}, inv...)...).expect(t, "first apply", 0, []string{"2 created"}, nil)
	writeSet(t, dir, ns, nil)
	cliRun(t, append([]string{"apply", dir}, inv...)...).expect(t, "empty without --allow-empty", 2, nil,
		[]string{"rendered no objects", "--allow-empty"})
	cliRun(t, append([]string{"apply", dir, "--allow-empty", "--prune-budget", "1"}, inv...)...).expect(t,
		"empty over the budget", 2, nil, []string{"2 objects to prune exceed the budget of 1"})
	cliRun(t, append([]string{"apply", dir, "--allow-empty", "--dry-run"}, inv...)...).expect(t,
		"empty dry-run", 1, []string{"2 pruned"}, nil)
	cliRun(t, append([]string{"apply", dir, "--allow-empty"}, inv...)...).expect(t, "empty", 0, []string{"2 pruned"}, nil)
	c := testClient(t)
	for _, name := range []string{"one", "two"} {
		err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &corev1.ConfigMap{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("ConfigMap %s after the empty apply: %v, want not found (pruned)", name, err)
		}
	}
}

// freshNamespace is a namespace name that does not exist yet, deleted after t.
func freshNamespace(t *testing.T, suffix string) string {
	t.Helper()
	ns := env.Namespace(t) + suffix
	t.Cleanup(func() {
		_ = testClient(t).Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	})
	return ns
}

// TestApplyCLIInventoryNamespace: "--inventory NAME -n NS" keeps the inventory in NS; a set
// that declares the namespace of its inventory applies into a cluster without it (no
// --adopt, no kubectl create namespace first); an inventory namespace the set does not
// declare is refused with what to do, and created with --create-namespace.
func TestApplyCLIInventoryNamespace(t *testing.T) {
	cluster.Require(t, env)
	c := testClient(t)
	ns := freshNamespace(t, "-a")
	dir := setDir(t, ns, map[string]string{"ns.yaml": "apiVersion: v1\nkind: Namespace\nmetadata: {name: NS}\n", "cm.yaml": cmNamed("cm")})
	cliRun(t, "apply", dir, "-n", ns, "--inventory", "app1").expect(t, "set with its namespace", 0,
		[]string{"ConfigMap/" + ns + "/cm created", "Namespace/" + ns}, nil)
	head := &corev1.ConfigMap{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "app1"}, head); err != nil {
		t.Errorf("inventory %s/app1: %v", ns, err)
	}
	cliRun(t, "apply", dir, "-n", ns, "--inventory", "app1").expect(t, "second run", 0, []string{"0 created, 0 configured, 2 unchanged"}, nil)

	other := freshNamespace(t, "-b")
	dir = setDir(t, other, map[string]string{"cm.yaml": cmNamed("cm")})
	cliRun(t, "apply", dir, "-n", other, "--inventory", "app1", "--dry-run").expect(t, "missing namespace, dry-run", 2, nil, []string{
		"namespace " + other + " does not exist: declare it in the set (a Namespace object), create it (kubectl create namespace " + other + ")"})
	cliRun(t, "apply", dir, "-n", other, "--inventory", "app1").expect(t, "missing namespace", 2, nil, []string{
		"namespace " + other + " does not exist: create it (kubectl create namespace " + other + ") or pass --create-namespace"})
	cliRun(t, "apply", dir, "-n", other, "--inventory", "app1", "--create-namespace").expect(t, "--create-namespace", 0,
		[]string{"ConfigMap/" + other + "/cm created"}, nil)
}
