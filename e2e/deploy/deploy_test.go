package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/e2e/binary"
	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/e2e/gitserver"
	"github.com/converge-dev/converge/status/v1alpha1"
)

var env *cluster.Cluster

// Full: the aggregation controller fills converge-apply, the Deployment becomes Available
// on the kwok node (through PodSecurity "restricted"), and namespaces really go away.
func TestMain(m *testing.M) { cluster.Main(m, cluster.Full, &env) }

// baseObjects is the number of objects of deploy/ (kubectl kustomize deploy | grep -c ^kind:).
const baseObjects = 14

// TestDeployLifecycle installs deploy/ with the binary (dry-run, apply, re-apply), checks
// kubectl's own dry-run of the base, runs the daemon authenticated as the base's
// ServiceAccount, and uninstalls. The steps depend on each other: a failed step stops it.
func TestDeployLifecycle(t *testing.T) {
	cluster.Require(t, env)
	f := &fixture{c: adminClient(t), ns: env.Namespace(t)}
	t.Cleanup(func() {
		_ = f.c.Delete(context.Background(), &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "converge-apply-workloads"}})
	})
	steps := []struct {
		name string
		run  func(t *testing.T, f *fixture)
	}{
		{"install dry-run writes nothing", testInstallDryRun},
		{"install", testInstall},
		{"second install changes nothing", testReinstallNoop},
		{"kubectl server-side dry-run", testKubectlDryRun},
		{"daemon as the ServiceAccount", testDaemonAsServiceAccount},
		{"sharded daemons as the ServiceAccount", testShardedDaemonsAsServiceAccount},
		{"uninstall refuses without --yes", testUninstallNeedsYes},
		{"uninstall", testUninstall},
	}
	for _, s := range steps {
		if !t.Run(s.name, func(t *testing.T) { s.run(t, f) }) {
			t.Fatalf("step %q failed; later steps depend on it", s.name)
		}
	}
}

// fixture is what the steps share: an admin client and the namespace of the Syncs, which
// outlives the steps so uninstall can check what it orphaned.
type fixture struct {
	c  client.Client
	ns string
}

// report is the JSON output of "converge install -o json".
type report struct {
	DryRun  bool `json:"dryRun"`
	Objects []struct {
		Kind, Namespace, Name, Action, Message, Health string
	} `json:"objects"`
	Summary struct {
		Created, Configured, Unchanged, Pruned, Skipped, Failed, NotReady int
	} `json:"summary"`
	Error string `json:"error"`
}

func install(t *testing.T, args ...string) report {
	t.Helper()
	out, errOut, code := converge(t, nil, append([]string{"install", "-o", "json", "--timeout", "3m"}, args...)...)
	want := 0
	if slices.Contains(args, "--dry-run") {
		want = 1 // as converge apply --dry-run: something would change
	}
	if code != want {
		t.Fatalf("converge install %v: exit %d, want %d\n%s\n%s", args, code, want, out, errOut)
	}
	var r report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("install output: %v\n%s", err, out)
	}
	if len(r.Objects) != baseObjects {
		t.Errorf("install listed %d objects, want %d:\n%s", len(r.Objects), baseObjects, out)
	}
	return r
}

func testInstallDryRun(t *testing.T, f *fixture) {
	r := install(t, "--dry-run")
	if !r.DryRun || r.Summary.Created != baseObjects || r.Summary.Failed != 0 {
		t.Errorf("dry-run summary %+v, want %d created (dry run)", r.Summary, baseObjects)
	}
	for _, want := range []string{"Namespace/converge-system", "CustomResourceDefinition/syncs.converge.dev",
		"ClusterRole/converge", "ClusterRole/converge-apply", "Deployment/converge-system/converge", "Service/converge-system/converge-metrics"} {
		found := false
		for _, o := range r.Objects {
			found = found || strings.Join(nonEmpty(o.Kind, o.Namespace, o.Name), "/") == want
		}
		if !found {
			t.Errorf("dry-run does not list %s", want)
		}
	}
	err := f.c.Get(context.Background(), client.ObjectKey{Name: "converge-system"}, &corev1.Namespace{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("a dry-run created namespace converge-system: %v", err)
	}
}

func testInstall(t *testing.T, f *fixture) {
	r := install(t)
	if r.Summary.Created != baseObjects || r.Summary.NotReady != 0 {
		t.Errorf("install summary %+v, want %d created, all ready", r.Summary, baseObjects)
	}
	d := &appsv1.Deployment{}
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: "converge-system", Name: "converge"}, d); err != nil {
		t.Fatal(err)
	}
	if d.Status.AvailableReplicas != 3 {
		t.Errorf("the daemon Deployment has %d available replicas, want 3 (PodSecurity restricted admits its pods)", d.Status.AvailableReplicas)
	}
	pdb := &policyv1.PodDisruptionBudget{}
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: "converge-system", Name: "converge"}, pdb); err != nil {
		t.Fatal(err)
	}
	if pdb.Status.ExpectedPods != 3 || pdb.Status.DisruptionsAllowed != 1 {
		t.Errorf("PodDisruptionBudget: %d expected pods, %d disruptions allowed; want 3 and 1", pdb.Status.ExpectedPods, pdb.Status.DisruptionsAllowed)
	}
}

func testReinstallNoop(t *testing.T, _ *fixture) {
	r := install(t)
	s := r.Summary
	if s.Unchanged != baseObjects || s.Created+s.Configured+s.Pruned+s.Failed != 0 {
		t.Errorf("second install summary %+v, want all %d unchanged", s, baseObjects)
	}
	for _, o := range r.Objects {
		if o.Action != "unchanged" {
			t.Errorf("%s %s/%s: %s %s", o.Kind, o.Namespace, o.Name, o.Action, o.Message)
		}
	}
}

func testKubectlDryRun(t *testing.T, _ *fixture) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not installed")
	}
	out, err := exec.Command(kubectl, "--kubeconfig", env.Kubeconfig, "apply", "-k", "../../deploy",
		"--server-side", "--dry-run=server").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl apply -k deploy --server-side --dry-run=server: %v\n%s", err, out)
	}
	if n := strings.Count(string(out), "(server dry run)"); n != baseObjects {
		t.Errorf("kubectl dry-ran %d objects, want %d:\n%s", n, baseObjects, out)
	}
}

// testDaemonAsServiceAccount runs the daemon with a token of converge-system/converge: with
// the base's RBAC and the example apply grant, a Sync of a ConfigMap becomes Ready; a Sync of
// a PriorityClass, which nothing grants, fails with the API server's "forbidden".
func testDaemonAsServiceAccount(t *testing.T, f *fixture) {
	ctx, c, ns := context.Background(), f.c, f.ns
	// The example grant, applied with the CLI as an admin would.
	if out, errOut, code := converge(t, nil, "apply", "../../deploy/examples/apply-rbac", "--inventory", "default/converge-example-apply-rbac"); code != 0 {
		t.Fatalf("apply the example grant: exit %d\n%s\n%s", code, out, errOut)
	}
	waitFor(t, "converge-apply to aggregate the ConfigMap grant", func(ctx context.Context) bool {
		cr := &rbacv1.ClusterRole{}
		if err := c.Get(ctx, client.ObjectKey{Name: "converge-apply"}, cr); err != nil {
			return false
		}
		for _, r := range cr.Rules {
			for _, res := range r.Resources {
				if res == "configmaps" {
					return true
				}
			}
		}
		return false
	})

	srv, err := gitserver.Start(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	rev := publish(t, srv, "app", "cm.yaml", fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: hello, namespace: %s}\ndata: {k: v}\n", ns))
	publish(t, srv, "forbidden", "pc.yaml", "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: converge-e2e-forbidden}\nvalue: 1000\n")

	health := cluster.FreeAddr()
	daemon := binary.Start(t, "run", "--kubeconfig", serviceAccountKubeconfig(t),
		"--install-crd=false", "--leader-elect=true", "--leader-election-namespace=converge-system",
		"--metrics-addr=0", "--health-addr="+health, "--git-cache-dir="+t.TempDir(), "--allow-local-git")

	createSync(t, c, ns, "app", srv.RepoURL("app"))
	createSync(t, c, ns, "forbidden", srv.RepoURL("forbidden"))
	s := waitSync(t, c, ns, "app", func(s *v1alpha1.Sync) bool {
		return s.Status.LastAppliedRevision == rev && meta.IsStatusConditionTrue(s.Status.Conditions, v1alpha1.ConditionReady)
	})
	if s.Status.ObservedGeneration != s.Generation {
		t.Errorf("observedGeneration %d, generation %d", s.Status.ObservedGeneration, s.Generation)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "hello"}, &corev1.ConfigMap{}); err != nil {
		t.Errorf("the Sync's ConfigMap: %v", err)
	}

	s = waitSync(t, c, ns, "forbidden", func(s *v1alpha1.Sync) bool {
		return meta.IsStatusConditionFalse(s.Status.Conditions, v1alpha1.ConditionReady) && s.Status.LastAttemptedRevision != ""
	})
	ready := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
	t.Logf("Sync forbidden: Ready=False %s: %s", ready.Reason, ready.Message)
	for _, want := range []string{"forbidden", "priorityclasses", "system:serviceaccount:converge-system:converge"} {
		if !strings.Contains(ready.Message, want) {
			t.Errorf("Ready message %q does not contain %q", ready.Message, want)
		}
	}
	err = c.Get(ctx, client.ObjectKey{Name: "converge-e2e-forbidden"}, &schedulingv1.PriorityClass{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("the forbidden PriorityClass exists: %v", err)
	}

	// The Lease RBAC: the daemon leads through converge-system/converge-leader.
	waitFor(t, "the daemon to hold the Lease", func(ctx context.Context) bool {
		lease := &coordinationv1.Lease{}
		err := c.Get(ctx, client.ObjectKey{Namespace: "converge-system", Name: "converge-leader"}, lease)
		return err == nil && lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != ""
	})
	resp, err := http.Get("http://" + health + "/readyz")
	if err != nil {
		t.Fatalf("/readyz: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/readyz answered %d", resp.StatusCode)
	}
	// The next step uninstalls with Syncs that carry the finalizer, which a stopped daemon
	// can no longer remove.
	if err := daemon.Stop(); err != nil {
		t.Error(err)
	}
	s = &v1alpha1.Sync{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, s); err != nil || len(s.Finalizers) == 0 {
		t.Errorf("Sync app has no finalizer (%v): the uninstall step would not test their removal", err)
	}
}

// testShardedDaemonsAsServiceAccount runs two daemons with --sharding=auto as the base's
// ServiceAccount: with only the base's Lease RBAC they create, hold and share the shard
// Leases and their replica Leases in converge-system, and a Sync becomes Ready with
// status.owner naming the replica that holds its shard.
func testShardedDaemonsAsServiceAccount(t *testing.T, f *fixture) {
	c, ns := f.c, f.ns
	srv, err := gitserver.Start(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	rev := publish(t, srv, "sharded", "cm.yaml", fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: sharded, namespace: %s}\ndata: {k: v}\n", ns))
	kubeconfig := serviceAccountKubeconfig(t)
	var daemons []*binary.Process
	for _, name := range []string{"converge-r0", "converge-r1"} {
		daemons = append(daemons, binary.Start(t, "run", "--kubeconfig", kubeconfig, "--replica-name", name,
			"--install-crd=false", "--sharding=auto", "--leader-elect=true", "--leader-election-namespace=converge-system",
			"--metrics-addr=0", "--health-addr="+cluster.FreeAddr(), "--git-cache-dir="+t.TempDir(), "--allow-local-git"))
	}
	createSync(t, c, ns, "sharded", srv.RepoURL("sharded"))
	s := waitSync(t, c, ns, "sharded", func(s *v1alpha1.Sync) bool {
		return s.Status.LastAppliedRevision == rev && meta.IsStatusConditionTrue(s.Status.Conditions, v1alpha1.ConditionReady)
	})
	if s.Status.Owner != "converge-r0" && s.Status.Owner != "converge-r1" {
		t.Errorf("status.owner %q, want one of the replicas converge-r0, converge-r1", s.Status.Owner)
	}

	// Every shard Lease held, by both replicas between them; both replica Leases present.
	var holders map[string]int
	waitFor(t, "the shard Leases shared by both replicas", func(ctx context.Context) bool {
		list := &coordinationv1.LeaseList{}
		if err := c.List(ctx, list, client.InNamespace("converge-system"), client.MatchingLabels{"app.kubernetes.io/name": "converge"}); err != nil {
			return false
		}
		holders = map[string]int{}
		shards := 0
		for _, l := range list.Items {
			switch {
			case strings.HasPrefix(l.Name, "converge-shard-"):
				shards++
				if l.Spec.HolderIdentity != nil {
					holders[strings.SplitN(*l.Spec.HolderIdentity, "_", 2)[0]]++
				}
			case strings.HasPrefix(l.Name, "converge-replica-"):
				holders[l.Name]++
			}
		}
		return shards == 64 && holders["converge-r0"]+holders["converge-r1"] == 64 && holders["converge-r0"] > 0 && holders["converge-r1"] > 0 &&
			holders["converge-replica-converge-r0"] == 1 && holders["converge-replica-converge-r1"] == 1
	})
	for _, d := range daemons {
		if err := d.Stop(); err != nil {
			t.Error(err)
		}
		// The Sync "forbidden" of the previous step fails as before; a Lease request must not.
		for _, line := range strings.Split(d.Log(), "\n") {
			if strings.Contains(line, "forbidden") && strings.Contains(line, "leases") {
				t.Errorf("a sharded daemon was refused a Lease request: %s", line)
			}
		}
	}
}

func testUninstallNeedsYes(t *testing.T, f *fixture) {
	out, errOut, code := converge(t, strings.NewReader(""), "uninstall")
	if code != 2 || !strings.Contains(errOut, "--yes") || !strings.Contains(errOut, "ORPHANED") {
		t.Errorf("uninstall without --yes: exit %d, stdout %q, stderr:\n%s\nwant exit 2, the warning and a hint at --yes", code, out, errOut)
	}
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: "converge-system", Name: "converge"}, &appsv1.Deployment{}); err != nil {
		t.Errorf("a refused uninstall removed the Deployment: %v", err)
	}
}

func testUninstall(t *testing.T, f *fixture) {
	ctx, c := context.Background(), f.c
	out, errOut, code := converge(t, nil, "uninstall", "--yes")
	if code != 0 {
		t.Fatalf("uninstall --yes: exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "orphaned") {
		t.Errorf("uninstall output does not say what was orphaned:\n%s", out)
	}
	for _, o := range []client.Object{
		&apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: "syncs.converge.dev"}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "converge"}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "converge-apply"}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "converge"}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "converge-system", Name: "converge"}},
	} {
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
			t.Errorf("%T %s survived the uninstall: %v", o, o.GetName(), err)
		}
	}
	waitFor(t, "namespace converge-system to be deleted", func(ctx context.Context) bool {
		return apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Name: "converge-system"}, &corev1.Namespace{}))
	})
	// What the Sync applied is orphaned, with its inventory; the example grant is not ours.
	for _, name := range []string{"hello", "app-inventory"} {
		if err := c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: name}, &corev1.ConfigMap{}); err != nil {
			t.Errorf("ConfigMap %s applied by the Sync was not orphaned: %v", name, err)
		}
	}
	if err := c.Get(ctx, client.ObjectKey{Name: "converge-apply-workloads"}, &rbacv1.ClusterRole{}); err != nil {
		t.Errorf("the user's aggregated grant was removed: %v", err)
	}
}

// serviceAccountKubeconfig writes a kubeconfig for a TokenRequest token of
// converge-system/converge, with the cluster's CA.
func serviceAccountKubeconfig(t *testing.T) string {
	t.Helper()
	exp := int64(3600)
	tok, err := env.Clientset().CoreV1().ServiceAccounts("converge-system").CreateToken(context.Background(), "converge",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token request: %v", err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
	cfg.AuthInfos["converge"] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "converge", Namespace: "converge-system"}
	cfg.CurrentContext = "local"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func createSync(t *testing.T, c client.Client, ns, name, url string) {
	t.Helper()
	s := &v1alpha1.Sync{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.SyncSpec{
			Source:   v1alpha1.Source{Git: &v1alpha1.GitSource{URL: url, Ref: v1alpha1.GitRef{Branch: "main"}}},
			Path:     ".",
			Interval: metav1.Duration{Duration: time.Minute},
			Prune:    true,
			Wait:     true,
			Timeout:  &metav1.Duration{Duration: 30 * time.Second},
		},
	}
	if err := c.Create(context.Background(), s); err != nil {
		t.Fatalf("create Sync %s: %v", name, err)
	}
}

func waitSync(t *testing.T, c client.Client, ns, name string, cond func(*v1alpha1.Sync) bool) *v1alpha1.Sync {
	t.Helper()
	s := &v1alpha1.Sync{}
	waitFor(t, "Sync "+name, func(ctx context.Context) bool {
		return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s) == nil && cond(s)
	})
	return s
}

func waitFor(t *testing.T, what string, cond func(context.Context) bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 2*time.Minute, true,
		func(ctx context.Context) (bool, error) { return cond(ctx), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func publish(t *testing.T, srv *gitserver.Server, repo, file, content string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, file), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	sha, err := srv.Publish(repo, "main", dir, "test commit")
	if err != nil {
		t.Fatal(err)
	}
	return "main@sha1:" + sha
}

func adminClient(t *testing.T) client.Client {
	return env.Client(t, apiextensionsv1.AddToScheme, v1alpha1.AddToScheme)
}

func nonEmpty(parts ...string) []string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

// converge runs the binary as the admin with stdin and returns stdout, stderr and the exit code.
func converge(t *testing.T, stdin *strings.Reader, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binary.Converge(t), append([]string{"--kubeconfig", env.Kubeconfig}, args...)...)
	if stdin != nil {
		cmd.Stdin = stdin
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return out.String(), errOut.String(), ee.ExitCode()
	case err != nil:
		t.Fatalf("run converge: %v", err)
	}
	return out.String(), errOut.String(), 0
}
