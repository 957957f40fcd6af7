package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/cmd/converge/internal/scheme"
	"github.com/converge-dev/converge/cmd/converge/internal/synctest"
	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/engine"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// cli runs converge with args in-process and returns stdout and the exit code.
func cli(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := newRootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(append([]string{"--kubeconfig", env.Kubeconfig}, args...))
	err := cmd.ExecuteContext(context.Background())
	code := 0
	if err != nil {
		code = exitCode(err)
	}
	return out.String(), code
}

var revisionRE = regexp.MustCompile(`sha256:[0-9a-f]{64}`)

// golden compares got, with the namespace and revision normalized, to testdata/name.
func golden(t *testing.T, name, ns, got string) {
	t.Helper()
	got = revisionRE.ReplaceAllString(strings.ReplaceAll(got, ns, "NS"), "sha256:REV")
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s (-want +got):\n%s", name, diff)
	}
}

// writeSet replaces the files of dir with files (content "NS" is the namespace).
func writeSet(t *testing.T, dir, ns string, files map[string]string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		_ = os.RemoveAll(filepath.Join(dir, e.Name()))
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(strings.ReplaceAll(content, "NS", ns)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// resourceVersions maps the ConfigMaps of ns to their resourceVersions.
func resourceVersions(t *testing.T, ns string) map[string]string {
	t.Helper()
	list := &corev1.ConfigMapList{}
	c, err := client.New(env.Config, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	rv := map[string]string{}
	for _, cm := range list.Items {
		rv[cm.Name] = cm.ResourceVersion
	}
	return rv
}

// applyStep is one "converge apply" run of a golden test: the set it applies, its extra
// flags, and the exit code it must end with.
type applyStep struct {
	name  string
	files map[string]string // the set; nil keeps the folder as it is
	args  []string
	code  int
	// also are further output formats (json, yaml, markdown) to run the step in, each with
	// its own golden file. Only for dry-runs: a dry-run leaves the cluster as it was.
	also []string
}

// goldenExt is the extension of a golden file of output format o.
var goldenExt = map[string]string{"json": ".json", "yaml": ".yaml", "markdown": ".md"}

// runSteps runs steps in order against dir with base flags: exit codes, golden output
// (testdata/apply-<name>.txt and apply-<name>.<format>), and, for every dry-run, the
// same resourceVersions in ns before and after.
func runSteps(t *testing.T, dir, ns string, base []string, steps []applyStep) {
	t.Helper()
	for _, st := range steps {
		if st.files != nil {
			writeSet(t, dir, ns, st.files)
		}
		before := resourceVersions(t, ns)
		args := append(append([]string{"apply", dir}, base...), st.args...)
		out, code := cli(t, args...)
		if code != st.code {
			t.Errorf("%s: exit code %d, want %d; output:\n%s", st.name, code, st.code, out)
		}
		golden(t, "apply-"+st.name+".txt", ns, out)
		for _, format := range st.also {
			out, code := cli(t, append(args, "-o", format)...)
			if code != st.code {
				t.Errorf("%s -o %s: exit code %d, want %d; output:\n%s", st.name, format, code, st.code, out)
			}
			golden(t, "apply-"+st.name+goldenExt[format], ns, out)
		}
		if slices.Contains(st.args, "--dry-run") {
			if diff := cmp.Diff(before, resourceVersions(t, ns)); diff != "" {
				t.Errorf("%s: a dry-run changed the cluster (-before +after):\n%s", st.name, diff)
			}
		}
	}
}

// TestApplyCLI walks "converge apply" through a fresh apply, a no-op, a change with a prune,
// a change, a prune and a failed object, each in dry-run and real mode: golden output for
// people and machines (json, yaml, markdown), exit codes, and a dry-run that never changes
// the cluster (resourceVersions before and after).
func TestApplyCLI(t *testing.T) {
	cluster.Require(t, env)
	ns := env.Namespace(t)
	dir := filepath.Join(t.TempDir(), "app")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	a := func(version string) string { return strings.Replace(cmA, "VERSION", version, 1) }
	v1 := map[string]string{"a.yaml": a("1"), "b.yaml": cmB}
	v2 := map[string]string{"a.yaml": a("2")}
	v3 := map[string]string{"a.yaml": a("3")}
	v3b := map[string]string{"a.yaml": a("3"), "b.yaml": cmB}
	bad := map[string]string{"a.yaml": a("3"),
		"svc.yaml": "apiVersion: v1\nkind: Service\nmetadata: {name: bad, namespace: NS}\nspec: {ports: [{port: 70000}]}\n"}
	dryRun, json := []string{"--dry-run"}, []string{"json"}
	runSteps(t, dir, ns, []string{"-n", ns, "--inventory=" + ns + "/app", "--prune"}, []applyStep{
		{"fresh-dry-run", v1, dryRun, 1, json},
		{"fresh", v1, nil, 0, nil},
		{"noop-dry-run", v1, dryRun, 0, json},
		{"noop", v1, nil, 0, nil},
		{"change-and-prune-dry-run", v2, []string{"--dry-run", "--diff"}, 1, []string{"json", "yaml", "markdown"}},
		{"change-and-prune-json", v2, []string{"-o", "json"}, 0, nil},
		{"change-dry-run", v3, dryRun, 1, json},
		{"change", v3, nil, 0, nil},
		{"add", v3b, nil, 0, nil},
		{"prune-dry-run", v3, dryRun, 1, json},
		{"prune", v3, nil, 0, nil},
		{"failed-object-dry-run", bad, dryRun, 2, []string{"json", "markdown"}},
		{"failed-object", bad, nil, 2, nil},
	})
}

// widgetCRD and widget are a CRD and one of its resources.
const widgetCRD, widget = synctest.WidgetCRD, synctest.Widget

// TestApplyCLICRDAndCustomResources applies a CRD and its custom resource in one set: the
// dry-run reports both (the resource as created although its kind does not exist yet) and
// changes nothing; the apply creates both; then dry-run and apply find nothing to do;
// golden output and exit codes.
func TestApplyCLICRDAndCustomResources(t *testing.T) {
	cluster.Require(t, env)
	ns := env.Namespace(t)
	dir := filepath.Join(t.TempDir(), "widgets")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeSet(t, dir, ns, map[string]string{"crd.yaml": widgetCRD, "widget.yaml": widget})
	t.Cleanup(func() { // the CRD is cluster-scoped: leave no trace for a later run
		c, err := client.New(env.Config, client.Options{Scheme: scheme.New()})
		if err == nil {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			crd.Name = "widgets.cli.converge.dev"
			_ = c.Delete(context.Background(), crd)
		}
	})
	runSteps(t, dir, ns, []string{"-n", ns, "--inventory=" + ns + "/widgets", "--prune"}, []applyStep{
		{"crd-dry-run", nil, []string{"--dry-run"}, 1, []string{"json"}},
		{"crd", nil, nil, 0, nil},
		{"crd-noop-dry-run", nil, []string{"--dry-run"}, 0, nil},
		{"crd-noop", nil, nil, 0, nil},
	})
}

// TestApplyCLIFieldManager checks on the API server that the applied fields belong to the
// server-side apply manager --field-manager names, and to "converge" without the flag.
func TestApplyCLIFieldManager(t *testing.T) {
	cluster.Require(t, env)
	ns := env.Namespace(t)
	c, err := client.New(env.Config, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"default", nil, "converge"},
		{"flag", []string{"--field-manager", "ci-bot"}, "ci-bot"},
	} {
		dir := filepath.Join(t.TempDir(), tc.name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		writeSet(t, dir, ns, map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: " + tc.name + "}\ndata: {k: v}\n"})
		if out, code := cli(t, append([]string{"apply", dir, "-n", ns, "--inventory", ns + "/inv-" + tc.name}, tc.args...)...); code != 0 {
			t.Fatalf("%s: exit code %d; output:\n%s", tc.name, code, out)
		}
		cm := &corev1.ConfigMap{}
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: tc.name}, cm); err != nil {
			t.Fatal(err)
		}
		var managers []string
		for _, m := range cm.ManagedFields {
			managers = append(managers, m.Manager+" "+string(m.Operation))
		}
		if diff := cmp.Diff([]string{tc.want + " Apply"}, managers); diff != "" {
			t.Errorf("%s: managedFields managers (-want +got):\n%s", tc.name, diff)
		}
	}
}

// TestApplyCLIBadInput checks input a user must fix before anything can be applied: a PATH
// that does not exist and a kubeconfig whose cluster cannot be reached each end with exit
// code 2, nothing on stdout, and one line that names the problem and says what to do.
func TestApplyCLIBadInput(t *testing.T) {
	dir := t.TempDir()
	writeSet(t, dir, "x", map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"})
	unreachable := filepath.Join(t.TempDir(), "kubeconfig")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["gone"] = &clientcmdapi.Cluster{Server: "https://" + cluster.FreeAddr()}
	kc.AuthInfos["me"] = &clientcmdapi.AuthInfo{Token: "t"}
	kc.Contexts["gone"] = &clientcmdapi.Context{Cluster: "gone", AuthInfo: "me"}
	kc.CurrentContext = "gone"
	if err := clientcmd.WriteToFile(*kc, unreachable); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"missing path", []string{"apply", filepath.Join(dir, "nope"), "--kubeconfig", unreachable, "--inventory", "x/app"},
			[]string{"nope does not exist", "give a folder"}},
		{"unreachable cluster", []string{"apply", dir, "--kubeconfig", unreachable, "--inventory", "x/app"},
			[]string{"cannot reach the cluster", "check --kubeconfig, --context or KUBECONFIG"}},
		{"unreachable cluster, dry-run", []string{"apply", dir, "--kubeconfig", unreachable, "--dry-run"},
			[]string{"cannot reach the cluster", "check --kubeconfig, --context or KUBECONFIG"}},
	} {
		out, errOut, code := runOffline(tc.args...)
		if code != exitCodeError || out != "" || strings.Contains(errOut, "\n") {
			t.Errorf("%s: exit %d, stdout %q, error %q; want exit 2, no stdout, a one-line error", tc.name, code, out, errOut)
		}
		for _, want := range tc.want {
			if !strings.Contains(errOut, want) {
				t.Errorf("%s: the error %q does not say %q", tc.name, errOut, want)
			}
		}
	}
}

// TestApplyCLIForbiddenKind applies, as a ServiceAccount that may write ConfigMaps but not
// Services, a set with one of each: the ConfigMap is applied, the Service is reported
// failed, and the run exits 2 with one line that names the missing permission and says
// what to do — in dry-run and real mode.
func TestApplyCLIForbiddenKind(t *testing.T) {
	cluster.Require(t, env)
	ns := env.Namespace(t)
	kubeconfig := limitedKubeconfig(t, ns, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"},
		Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}})
	dir := filepath.Join(t.TempDir(), "app")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeSet(t, dir, ns, map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "1", 1),
		"svc.yaml": "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: NS}\nspec: {ports: [{port: 80}]}\n"})
	for _, mode := range [][]string{{"--dry-run"}, nil} {
		args := append([]string{"--kubeconfig", kubeconfig, "apply", dir, "-n", ns, "--inventory", ns + "/app"}, mode...)
		out, errOut, code := runOffline(args...)
		if code != exitCodeError || strings.Contains(errOut, "\n") {
			t.Errorf("%v: exit %d, error %q; want exit 2 and a one-line error", mode, code, errOut)
		}
		for _, want := range []string{`"services"`, "forbidden", "ask for an RBAC grant"} {
			if !strings.Contains(errOut, want) {
				t.Errorf("%v: the error %q does not say %q", mode, errOut, want)
			}
		}
		if !strings.Contains(out, "Service/"+ns+"/web failed") || !strings.Contains(out, "ConfigMap/"+ns+"/a created") {
			t.Errorf("%v: the report does not show the ConfigMap created and the Service failed:\n%s", mode, out)
		}
	}
	if _, err := env.Clientset().CoreV1().ConfigMaps(ns).Get(context.Background(), "a", metav1.GetOptions{}); err != nil {
		t.Errorf("the permitted ConfigMap was not applied: %v", err)
	}
}

// TestApplyCLIDryRunWithoutInventory: a set applied from one folder, changed and rendered
// into another folder (as CI does in a temporary checkout), is dry-run without --inventory:
// a plain diff against the live objects, exit 1, the owner shown as information, nothing
// written. Without it, the dry-run took the inventory converge-cli-<folder>, failed every
// object with "owned by another inventory" and exited 2.
func TestApplyCLIDryRunWithoutInventory(t *testing.T) {
	cluster.Require(t, env)
	ns := env.Namespace(t)
	a, b := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	for _, d := range []string{a, b} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeSet(t, a, ns, map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "1", 1), "b.yaml": cmB})
	if out, errOut, code := cliErr("apply", a, "-n", ns, "--inventory", ns+"/app", "--prune"); code != 0 {
		t.Fatalf("apply: exit %d: %s%s", code, out, errOut)
	}
	writeSet(t, b, ns, map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "2", 1), "b.yaml": cmB})
	before := resourceVersions(t, ns)
	out, errOut, code := cliErr("apply", b, "-n", ns, "--dry-run", "--diff")
	if code != exitCodeChanges {
		t.Errorf("dry-run from another folder: exit %d, want 1 (changes found):\n%s%s", code, out, errOut)
	}
	owner := "owned by converge apply --inventory " + ns + "/app"
	for _, want := range []string{"ConfigMap/" + ns + "/a configured (dry run): " + owner, "ConfigMap/" + ns + "/b unchanged: " + owner,
		`-  version: "1"`, `+  version: "2"`} {
		if !strings.Contains(out, want) {
			t.Errorf("the dry-run output does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, engine.OwnerAnnotation) {
		t.Errorf("the plain diff shows the owner annotation changing:\n%s", out)
	}
	if diff := cmp.Diff(before, resourceVersions(t, ns)); diff != "" {
		t.Errorf("the dry-run changed the cluster (-before +after):\n%s", diff)
	}
}

// TestApplyCLINeedsInventory: two apps that both keep an overlays/prod folder never share
// an inventory. A real apply without --inventory is refused before anything is written
// (exit 2, saying what to pass); with one inventory each, the second app cannot take the
// first app's object, and the message names the object and its owner. Without it, both got the
// default inventory converge-cli-prod and the second silently took the first's object.
func TestApplyCLINeedsInventory(t *testing.T) {
	cluster.Require(t, env)
	ns := env.Namespace(t)
	root := t.TempDir()
	settings := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: NS}\ndata: {app: APP}\n"
	dirs := map[string]string{}
	for _, app := range []string{"app1", "app2"} {
		dirs[app] = filepath.Join(root, app, "overlays", "prod")
		if err := os.MkdirAll(dirs[app], 0o755); err != nil {
			t.Fatal(err)
		}
		writeSet(t, dirs[app], ns, map[string]string{"settings.yaml": strings.Replace(settings, "APP", app, 1)})
	}
	out, errOut, code := cliErr("apply", dirs["app1"], "-n", ns)
	if code != exitCodeError || !strings.Contains(errOut, "needs --inventory NAMESPACE/NAME") {
		t.Errorf("apply without --inventory: exit %d, %s%s; want exit 2 asking for --inventory", code, out, errOut)
	}
	if _, err := env.Clientset().CoreV1().ConfigMaps(ns).Get(context.Background(), "settings", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("apply without --inventory wrote the object: %v", err)
	}
	if out, errOut, code := cliErr("apply", dirs["app1"], "-n", ns, "--inventory", ns+"/app1"); code != 0 {
		t.Fatalf("apply app1: exit %d: %s%s", code, out, errOut)
	}
	out, errOut, code = cliErr("apply", dirs["app2"], "-n", ns, "--inventory", ns+"/app2")
	want := "ConfigMap " + ns + "/settings is owned by converge apply --inventory " + ns + "/app1; not adopted"
	if code != exitCodeError || !strings.Contains(errOut, want) || !strings.Contains(out, want) {
		t.Errorf("apply app2 over app1's object: exit %d, report:\n%s\nerror: %s\nwant exit 2 saying %q", code, out, errOut, want)
	}
	cm, err := env.Clientset().CoreV1().ConfigMaps(ns).Get(context.Background(), "settings", metav1.GetOptions{})
	if err != nil || cm.Data["app"] != "app1" {
		t.Errorf("settings = %v, %v; want app1's", cm, err)
	}
}

// limitedKubeconfig writes a kubeconfig for a TokenRequest token of a new ServiceAccount
// in ns that may do only what rules allow in ns.
func limitedKubeconfig(t *testing.T, ns string, rules ...rbacv1.PolicyRule) string {
	t.Helper()
	ctx := context.Background()
	cs := env.Clientset()
	meta := metav1.ObjectMeta{Name: "limited", Namespace: ns}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: meta}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: meta, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{ObjectMeta: meta,
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: meta.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: meta.Name, Namespace: ns}}}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	exp := int64(3600)
	tok, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, meta.Name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token request: %v", err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
	cfg.AuthInfos["limited"] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "limited", Namespace: ns}
	cfg.CurrentContext = "local"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestExplain checks the one line "converge apply" exits with: the first error, or the first
// whose cause the user can fix followed by what to do; the errors of objects the report
// lists as failed are counted, not repeated; other errors are spelled out, up to three.
func TestExplain(t *testing.T) {
	invalid := fmt.Errorf("ns_a__ConfigMap: apply: %w", apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "a", nil))
	forbidden := fmt.Errorf("ns_web__Service: apply: %w",
		apierrors.NewForbidden(schema.GroupResource{Resource: "services"}, "web", errors.New("no grant")))
	multiLine := errors.New("record: first line\nsecond line")
	failed := &engine.Result{Changes: []engine.Change{
		{ID: "ns_a__ConfigMap", Action: engine.ActionFailed, Err: invalid},
		{ID: "ns_web__Service", Action: engine.ActionFailed, Err: forbidden},
	}}
	for _, tc := range []struct {
		name string
		err  error
		res  *engine.Result
		want string
	}{
		{"one error", invalid, failed, invalid.Error()},
		{"line breaks", multiLine, nil, "record: first line second line"},
		{"listed objects are counted", errors.Join(invalid, invalid, multiLine), failed,
			invalid.Error() + " (and 1 more; see the report); record: first line second line"},
		{"unlisted errors are spelled out, up to three", errors.Join(invalid, multiLine, multiLine, multiLine, multiLine), nil,
			invalid.Error() + " (and 2 more; see the report); record: first line second line; record: first line second line"},
		{"forbidden leads", errors.Join(invalid, forbidden), failed,
			forbidden.Error() + " (and 1 more; see the report); " + hintForbidden},
	} {
		got := explain(tc.err, tc.res)
		if diff := cmp.Diff(tc.want, got.Error()); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
		if !errors.Is(got, tc.err) {
			t.Errorf("%s: the explained error does not wrap the original", tc.name)
		}
	}
}

// TestColorDiff checks diff colouring is only applied when asked (a terminal).
func TestColorDiff(t *testing.T) {
	diff := "--- live/x\n+++ desired/x\n@@ -1 +1 @@\n-a\n+b\n"
	if got := colorDiff(diff, false); got != diff {
		t.Errorf("uncoloured diff changed:\n%q", got)
	}
	got := colorDiff(diff, true)
	for _, want := range []string{"\x1b[31m-a\x1b[0m\n", "\x1b[32m+b\x1b[0m\n", "\x1b[36m@@ -1 +1 @@\x1b[0m\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("coloured diff lacks %q:\n%q", want, got)
		}
	}
}
