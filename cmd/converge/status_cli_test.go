package main

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/cmd/converge/internal/scheme"
	"github.com/converge-dev/converge/cmd/converge/internal/synctest"
	"github.com/converge-dev/converge/deploy"
	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// The Syncs of the status tests, with statuses as the daemon writes them: web applied rev1
// and fails on the newer rev2; api is Ready at rev1.
const (
	rev1     = "main@sha1:1111111111111111111111111111111111111111"
	rev2     = "main@sha1:2222222222222222222222222222222222222222"
	buildMsg = "kustomize build: overlays/prod: accumulating resources: 'deployment.yaml' does not exist"
)

// installSyncCRD applies the Sync CRD, as the daemon does at start, and waits until Syncs
// are served.
func installSyncCRD(t *testing.T) {
	t.Helper()
	cluster.Require(t, env)
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(deploy.SyncCRD, &obj.Object); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(env.Config, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Patch(ctx, obj, client.Apply, client.FieldOwner("converge-crd-installer"), client.ForceOwnership); err != nil {
		t.Fatal(err)
	}
	dc := dynamic.NewForConfigOrDie(env.Config)
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := dc.Resource(syncsResource).List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("Syncs not served: %v", err)
	}
}

// statusFixture creates the Syncs web and api in a fresh namespace, labelled team=<name> and
// suite=<namespace>, with their statuses, and sets the clock AGE is read against 90 minutes
// ahead. It returns the namespace and a client.
func statusFixture(t *testing.T) (string, client.Client) {
	t.Helper()
	installSyncCRD(t)
	ns := env.Namespace(t)
	c, err := client.New(env.Config, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	when := metav1.NewTime(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	for _, st := range []struct {
		name     string
		attempt  string
		ready    metav1.ConditionStatus
		reason   string
		msg      string
		suspend  bool
		replicas string
	}{
		{"web", rev2, metav1.ConditionFalse, "BuildFailed", buildMsg, false, "converge-0"},
		{"api", rev1, metav1.ConditionTrue, "ReconciliationSucceeded", "Applied revision " + rev1, true, "converge-1"},
	} {
		s := synctest.NewSync(ns, "https://git.example/app.git", time.Hour, func(s *v1alpha1.Sync) {
			s.Name, s.Labels, s.Spec.Suspend = st.name, map[string]string{"team": st.name, "suite": ns}, st.suspend
		})
		synctest.Create(t, c, s)
		s.Status = v1alpha1.SyncStatus{ObservedGeneration: s.Generation, LastAppliedRevision: rev1,
			LastAttemptedRevision: st.attempt, Owner: st.replicas,
			Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: st.ready, Reason: st.reason,
				Message: st.msg, ObservedGeneration: s.Generation, LastTransitionTime: when}}}
		if err := c.Status().Update(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().Add(90 * time.Minute)
	clock = func() time.Time { return now }
	t.Cleanup(func() { clock = time.Now })
	return ns, c
}

// run runs converge with args against the test cluster: stdout, stderr (the error the
// process would print last) and the exit code.
func run(args ...string) (string, string, int) {
	return runOffline(append([]string{"--kubeconfig", env.Kubeconfig}, args...)...)
}

// TestStatusShowsFailingRevision checks the table of `converge status` and `converge get
// syncs` says which newer revision fails and why, next to the last one applied: REVISION is
// rev1, REASON BuildFailed, MESSAGE "revision rev2 failed: …". Without it, the table showed rev1
// and the build error with no word of rev2, no reason, and `get syncs` looked for a Sync
// named "syncs".
func TestStatusShowsFailingRevision(t *testing.T) {
	ns, _ := statusFixture(t)
	for _, tc := range []struct {
		golden string
		args   []string
	}{
		{"status-cli-table.txt", []string{"status", "-n", ns}},
		{"status-cli-table.txt", []string{"get", "syncs", "-n", ns}},
		{"status-cli-table.txt", []string{"get", "sy", "-n", ns, "api", "web"}},
		{"status-cli-wide.txt", []string{"status", "-n", ns, "-o", "wide"}},
		{"status-cli-no-headers.txt", []string{"get", "sync/web", "-n", ns, "--no-headers"}},
		{"status-cli-selector.txt", []string{"get", "syncs", "-A", "-l", "team=web,suite=" + ns, "--no-headers"}},
	} {
		out, errOut, code := run(tc.args...)
		if code != 0 || errOut != "" {
			t.Errorf("%s: exit %d, stderr %q", strings.Join(tc.args, " "), code, errOut)
		}
		golden(t, tc.golden, ns, out)
	}
}

// TestStatusKubectlOutputs checks -o json, yaml, name and jsonpath print what kubectl get
// prints for the same objects: a List of the Syncs (the Sync itself for one NAME), their
// sync.converge.dev/NAME, a JSONPath over either. Without it, -o json and yaml printed rows
// of our own ({"syncs": [...]}) and name and jsonpath were refused.
func TestStatusKubectlOutputs(t *testing.T) {
	ns, _ := statusFixture(t)
	out, _, code := run("status", "-n", ns, "-o", "json")
	var list struct {
		APIVersion, Kind string
		Items            []v1alpha1.Sync
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil || code != 0 || list.Kind != "List" || list.APIVersion != "v1" ||
		len(list.Items) != 2 || list.Items[0].Kind != "Sync" || list.Items[1].Status.LastAttemptedRevision != rev2 {
		t.Errorf("-o json: exit %d, %v; want a v1 List of the Syncs api and web:\n%s", code, err, out)
	}
	if strings.Contains(out, "managedFields") {
		t.Errorf("-o json prints managedFields (kubectl leaves them out without --show-managed-fields)")
	}
	out, _, code = run("get", "syncs", "-n", ns, "web", "-o", "yaml")
	var one v1alpha1.Sync
	if err := yaml.Unmarshal([]byte(out), &one); err != nil || code != 0 || one.Kind != "Sync" || one.Name != "web" {
		t.Errorf("-o yaml NAME: exit %d, %v; want the Sync web itself:\n%s", code, err, out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "-n", ns, "-o", "name"}, "sync.converge.dev/api\nsync.converge.dev/web\n"},
		{[]string{"status", "-n", ns, "-o", "jsonpath={.items[*].status.lastAttemptedRevision}"}, rev1 + " " + rev2},
		{[]string{"status", "-n", ns, "web", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].reason}`}, "BuildFailed"},
		{[]string{"get", "syncs", "-n", ns, "-l", "team=api", "-o", "go-template={{range .items}}{{.spec.suspend}}{{end}}"}, "true"},
	} {
		out, errOut, code := run(tc.args...)
		if code != 0 || out != tc.want || errOut != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 0 and %q", strings.Join(tc.args, " "), code, out, errOut, tc.want)
		}
	}
}

// TestStatusErrors checks the errors of `converge status`, `get` and `reconcile` are one line
// that names what failed and says what to do, stdout empty, exit 2; an empty list is no error
// (kubectl's "No resources found" on stderr). Without it, an unreachable cluster printed the raw
// discovery error ("list syncs: failed to get server groups: …") and `get syncs` was a
// missing Sync.
func TestStatusErrors(t *testing.T) {
	ns, _ := statusFixture(t)
	unreachable := unreachableKubeconfig(t)
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"unreachable", []string{"status", "--kubeconfig", unreachable},
			[]string{"cannot reach the cluster (Get", "/namespaces/default/syncs", "check --kubeconfig, --context or KUBECONFIG"}},
		{"unreachable -A", []string{"get", "syncs", "-A", "--kubeconfig", unreachable},
			[]string{"cannot reach the cluster (Get", "/v1alpha1/syncs", "check --kubeconfig"}},
		{"reconcile, unreachable", []string{"reconcile", "app", "--kubeconfig", unreachable},
			[]string{"cannot reach the cluster (Get", "check --kubeconfig, --context or KUBECONFIG"}},
		{"reconcile, missing", []string{"reconcile", "-n", ns, "missing"},
			[]string{"sync " + ns + "/missing not found; converge status -n " + ns + " lists"}},
		{"missing", []string{"status", "-n", ns, "missing"},
			[]string{"sync " + ns + "/missing not found; converge status -n " + ns + " lists"}},
		{"missing, json", []string{"get", "syncs", "-n", ns, "missing", "-o", "json"},
			[]string{"sync " + ns + "/missing not found"}},
		{"no type", []string{"get"}, []string{"converge get needs a resource type; converge get lists Syncs"}},
		{"other type", []string{"get", "pods"}, []string{`unknown resource type "pods"`, "use kubectl"}},
		{"bad format", []string{"status", "-n", ns, "-o", "table"}, []string{`--output "table": allowed formats are wide, json, yaml`, "(default: the table)"}},
		{"bad jsonpath", []string{"status", "-n", ns, "-o", "jsonpath={.items["}, []string{`--output "jsonpath={.items["`}},
		{"bad selector", []string{"status", "-n", ns, "-l", "a=(b"}, []string{`--selector "a=(b"`}},
	} {
		out, errOut, code := run(tc.args...)
		if code != exitCodeError || out != "" || strings.Contains(errOut, "\n") {
			t.Errorf("%s: exit %d, stdout %q, error %q; want exit 2, no stdout, a one-line error", tc.name, code, out, errOut)
		}
		for _, want := range tc.want {
			if !strings.Contains(errOut, want) {
				t.Errorf("%s: the error %q does not say %q", tc.name, errOut, want)
			}
		}
	}
	out, errOut, code := run("get", "syncs", "-n", ns, "-l", "team=none")
	if code != 0 || out != "" || errOut != "No Syncs found in namespace "+ns+".\n" {
		t.Errorf("empty list: exit %d, stdout %q, stderr %q; want exit 0 and kubectl's line on stderr", code, out, errOut)
	}
}

// unreachableKubeconfig writes a kubeconfig whose cluster listens nowhere.
func unreachableKubeconfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["gone"] = &clientcmdapi.Cluster{Server: "https://" + cluster.FreeAddr()}
	kc.AuthInfos["me"] = &clientcmdapi.AuthInfo{Token: "t"}
	kc.Contexts["gone"] = &clientcmdapi.Context{Cluster: "gone", AuthInfo: "me"}
	kc.CurrentContext = "gone"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestKubectlGetSyncsColumns checks `kubectl get syncs` (the server-side table the CRD's
// printer columns make) shows the columns of `converge status` in the same order, OWNER and
// PINNED (spec.rollback's revision) only with -o wide (priority 1), and that kubectl knows the short name sy as `converge get` does.
// Without it, kubectl's STATUS column was the message and came before REVISION, there was no
// reason, and `kubectl get sy` was unknown.
func TestKubectlGetSyncsColumns(t *testing.T) {
	ns, _ := statusFixture(t)
	hc, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodGet, env.Config.Host+"/apis/converge.dev/v1alpha1/namespaces/"+ns+"/syncs", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var table metav1.Table
	if err := json.NewDecoder(resp.Body).Decode(&table); err != nil {
		t.Fatal(err)
	}
	var got, wide []string
	for _, c := range table.ColumnDefinitions {
		if c.Priority == 0 {
			got = append(got, strings.ToUpper(c.Name))
		} else {
			wide = append(wide, strings.ToUpper(c.Name))
		}
	}
	// converge status's columns, less SUSPENDED (a boolean kubectl shows as <none> when unset).
	want := []string{"NAME", "READY", "REASON", "REVISION", "AGE", "MESSAGE"}
	if !slices.Equal(got, want) || !slices.Equal(wide, []string{"OWNER", "PINNED"}) {
		t.Errorf("kubectl get syncs columns %v, -o wide adds %v; want %v and [OWNER PINNED]", got, wide, want)
	}
	resources, err := discovery.NewDiscoveryClientForConfigOrDie(env.Config).ServerResourcesForGroupVersion(v1alpha1.GroupVersion.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resources.APIResources {
		if r.Name == "syncs" && !slices.Contains(r.ShortNames, "sy") {
			t.Errorf("syncs short names %v; want sy, as converge get sy", r.ShortNames)
		}
	}
}
