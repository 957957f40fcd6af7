package main

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/converge-dev/converge/cmd/converge/internal/installer"
	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// These tests need no control plane: e2e/deploy installs, runs and uninstalls deploy/ for
// real. They pin what the base promises (least privilege, a hardened pod) so an edit that
// breaks a promise fails here with a precise message.

func renderedBase(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	objs, err := installer.RenderBase(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func find[T any](t *testing.T, objs []*unstructured.Unstructured, kind, name string) *T {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			out := new(T)
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out); err != nil {
				t.Fatalf("%s %s: %v", kind, name, err)
			}
			return out
		}
	}
	t.Fatalf("the deploy base has no %s %s", kind, name)
	return nil
}

func TestBaseObjects(t *testing.T) {
	var got []string
	for _, o := range renderedBase(t) {
		id := o.GetKind() + "/" + o.GetName()
		if o.GetNamespace() != "" {
			id = o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
		}
		got = append(got, id)
	}
	slices.Sort(got)
	want := []string{
		"ClusterRole/converge", "ClusterRole/converge-apply",
		"ClusterRoleBinding/converge", "ClusterRoleBinding/converge-apply",
		"CustomResourceDefinition/syncs.converge.dev",
		"Deployment/converge-system/converge",
		"Namespace/converge-system",
		"PodDisruptionBudget/converge-system/converge",
		"Role/converge-system/converge-leader-election",
		"Role/converge-system/converge-shard-leases",
		"RoleBinding/converge-system/converge-leader-election",
		"RoleBinding/converge-system/converge-shard-leases",
		"Service/converge-system/converge-metrics",
		"ServiceAccount/converge-system/converge",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("deploy base objects (-want +got):\n%s", diff)
	}
}

// allows reports whether rules grant verb on group/resource (object name, "" for any).
func allows(rules []rbacv1.PolicyRule, group, resource, verb, name string) bool {
	for _, r := range rules {
		if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) &&
			(len(r.ResourceNames) == 0 || (name != "" && slices.Contains(r.ResourceNames, name))) {
			return true
		}
	}
	return false
}

func TestBaseRBACIsLeastPrivilege(t *testing.T) {
	objs := renderedBase(t)
	cluster := find[rbacv1.ClusterRole](t, objs, "ClusterRole", "converge").Rules
	leases := find[rbacv1.Role](t, objs, "Role", "converge-leader-election").Rules
	shards := find[rbacv1.Role](t, objs, "Role", "converge-shard-leases")
	if shards.Namespace != "converge-system" {
		t.Errorf("the shard Lease Role is in namespace %q, want converge-system only", shards.Namespace)
	}
	for _, o := range objs {
		if o.GetKind() == "ClusterRole" && allowsAny(o, "coordination.k8s.io", "leases") {
			t.Errorf("ClusterRole %s grants leases: Lease rights belong in converge-system's Roles only", o.GetName())
		}
	}
	for _, tc := range []struct {
		name                          string
		rules                         []rbacv1.PolicyRule
		group, resource, verb, object string
		want                          bool
	}{
		{"watch syncs", cluster, "converge.dev", "syncs", "watch", "", true},
		{"patch sync finalizers", cluster, "converge.dev", "syncs", "patch", "", true},
		{"write sync status", cluster, "converge.dev", "syncs/status", "patch", "", true},
		{"create inventories", cluster, "", "configmaps", "create", "", true},
		{"update inventories", cluster, "", "configmaps", "update", "", true},
		{"collect unlisted inventory parts", cluster, "", "configmaps", "list", "", true},
		{"read a git secret", cluster, "", "secrets", "get", "", true},
		{"list secrets", cluster, "", "secrets", "list", "", false},
		{"record events", cluster, "", "events", "create", "", true},
		{"impersonate tenants", cluster, "", "serviceaccounts", "impersonate", "", true},
		{"impersonate users", cluster, "", "users", "impersonate", "", false},
		{"edit CRDs (runs with --install-crd=false)", cluster, "apiextensions.k8s.io", "customresourcedefinitions", "patch", "", false},
		{"apply deployments (granted through converge-apply only)", cluster, "apps", "deployments", "patch", "", false},
		{"create namespaces", cluster, "", "namespaces", "create", "", false},
		{"escalate through clusterroles", cluster, "rbac.authorization.k8s.io", "clusterroles", "create", "", false},
		{"create the lease", leases, "coordination.k8s.io", "leases", "create", "", true},
		{"renew the lease", leases, "coordination.k8s.io", "leases", "update", "converge-leader", true},
		{"renew another lease", leases, "coordination.k8s.io", "leases", "update", "kube-scheduler", false},
		{"list shard and replica leases", shards.Rules, "coordination.k8s.io", "leases", "list", "", true},
		{"create a shard lease", shards.Rules, "coordination.k8s.io", "leases", "create", "", true},
		{"take over a shard lease", shards.Rules, "coordination.k8s.io", "leases", "update", "converge-shard-07", true},
		{"delete the replica lease", shards.Rules, "coordination.k8s.io", "leases", "delete", "converge-replica-converge-7d9f8-x2k4p", true},
		{"shard leases are no secrets", shards.Rules, "", "secrets", "get", "", false},
	} {
		if got := allows(tc.rules, tc.group, tc.resource, tc.verb, tc.object); got != tc.want {
			t.Errorf("%s: allowed %v, want %v", tc.name, got, tc.want)
		}
	}
	for _, o := range objs {
		rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
		for _, r := range rules {
			if strings.Contains(strings.Join(flatten(r), " "), "*") {
				t.Errorf("%s %s has a wildcard rule %v", o.GetKind(), o.GetName(), r)
			}
		}
		if name, _, _ := unstructured.NestedString(o.Object, "roleRef", "name"); name == "cluster-admin" || name == "admin" || name == "edit" {
			t.Errorf("%s %s binds %s", o.GetKind(), o.GetName(), name)
		}
	}
	apply := find[rbacv1.ClusterRole](t, objs, "ClusterRole", "converge-apply")
	if apply.AggregationRule == nil || len(apply.Rules) != 0 ||
		apply.AggregationRule.ClusterRoleSelectors[0].MatchLabels["rbac.converge.dev/aggregate-to-apply"] != "true" {
		t.Errorf("converge-apply must aggregate rbac.converge.dev/aggregate-to-apply and own no rules: %+v", apply)
	}
}

// allowsAny reports whether the role object o has a rule on group/resource.
func allowsAny(o *unstructured.Unstructured, group, resource string) bool {
	role := &rbacv1.ClusterRole{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, role); err != nil {
		return false
	}
	for _, r := range role.Rules {
		if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) {
			return true
		}
	}
	return false
}

func flatten(v any) []string {
	switch v := v.(type) {
	case map[string]any:
		var out []string
		for _, x := range v {
			out = append(out, flatten(x)...)
		}
		return out
	case []any:
		var out []string
		for _, x := range v {
			out = append(out, flatten(x)...)
		}
		return out
	case string:
		return []string{v}
	}
	return nil
}

func TestBaseDeploymentIsHardened(t *testing.T) {
	d := find[appsv1.Deployment](t, renderedBase(t), "Deployment", "converge")
	pod := d.Spec.Template.Spec
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 || pod.ServiceAccountName != "converge" || len(pod.Containers) != 1 {
		t.Fatalf("want 3 replicas of one container as ServiceAccount converge: %+v", d.Spec)
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	switch {
	case pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot:
		t.Error("the pod must run as non-root")
	case pod.SecurityContext.SeccompProfile == nil || pod.SecurityContext.SeccompProfile.Type != "RuntimeDefault":
		t.Error("the pod must use the RuntimeDefault seccomp profile")
	case sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("the root filesystem must be read-only")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("privilege escalation must be off")
	case sc.Capabilities == nil || !slices.Equal(stringsOf(sc.Capabilities.Drop), []string{"ALL"}) || len(sc.Capabilities.Add) != 0:
		t.Error("every capability must be dropped")
	case c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero():
		t.Error("requests and limits must be set")
	case c.LivenessProbe == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" || c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz":
		t.Error("liveness /healthz and readiness /readyz probes are required")
	case c.Image != installer.BaseImage+":latest":
		t.Errorf("image %s, want the placeholder %s:latest", c.Image, installer.BaseImage)
	}
	for _, arg := range []string{"run", "--install-crd=false", "--sharding=auto", "--leader-elect=true", "--leader-election-namespace=converge-system",
		"--health-addr=:8081", "--metrics-addr=:8080", "--git-cache-dir=/tmp/converge-cache"} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("daemon args %v lack %s", c.Args, arg)
		}
	}
	// The replica's name is its pod's: --replica-name defaults to $POD_NAME.
	if i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "POD_NAME" }); i < 0 ||
		c.Env[i].ValueFrom == nil || c.Env[i].ValueFrom.FieldRef == nil || c.Env[i].ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("want POD_NAME from the downward API (metadata.name): %+v", c.Env)
	}
	// Replicas prefer distinct nodes.
	if a := pod.Affinity; a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 ||
		a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.TopologyKey != "kubernetes.io/hostname" {
		t.Errorf("want a preferred pod anti-affinity by kubernetes.io/hostname: %+v", pod.Affinity)
	}
	pdb := find[policyv1.PodDisruptionBudget](t, renderedBase(t), "PodDisruptionBudget", "converge")
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.Selector == nil ||
		!maps.Equal(pdb.Spec.Selector.MatchLabels, d.Spec.Selector.MatchLabels) {
		t.Errorf("want a PodDisruptionBudget of maxUnavailable 1 selecting the Deployment's pods: %+v", pdb.Spec)
	}
	if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != "/tmp" || pod.Volumes[0].EmptyDir == nil {
		t.Errorf("want an emptyDir at /tmp for the git cache: %+v %+v", c.VolumeMounts, pod.Volumes)
	}
}

func stringsOf[S ~string](in []S) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = string(s)
	}
	return out
}

func TestSetImage(t *testing.T) {
	for _, tc := range []struct {
		name, image, want, err string
	}{
		{"tag", "ghcr.io/converge-dev/converge:v0.1.0", "ghcr.io/converge-dev/converge:v0.1.0", ""},
		{"other registry with port", "registry.local:5000/converge@sha256:abc", "registry.local:5000/converge@sha256:abc", ""},
		{"space", "bad image", "", "want an image reference"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := installer.RenderBase(context.Background(), tc.image)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := find[appsv1.Deployment](t, objs, "Deployment", "converge").Spec.Template.Spec.Containers[0].Image; got != tc.want {
				t.Errorf("image %s, want %s", got, tc.want)
			}
		})
	}
}

func TestImageName(t *testing.T) {
	for ref, want := range map[string]string{
		"ghcr.io/converge-dev/converge:latest":      "ghcr.io/converge-dev/converge",
		"ghcr.io/converge-dev/converge@sha256:0123": "ghcr.io/converge-dev/converge",
		"localhost:5000/converge":                   "localhost:5000/converge",
		"converge":                                  "converge",
	} {
		if got := installer.ImageName(ref); got != want {
			t.Errorf("imageName(%q) = %q, want %q", ref, got, want)
		}
	}
}

// TestUninstallRefusesWithoutYes: without --yes and without a terminal to ask on, uninstall
// prints the warning, removes nothing (it does not even connect), and exits 2 saying why.
func TestUninstallRefusesWithoutYes(t *testing.T) {
	cmd := newRootCommand()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetIn(strings.NewReader("yes\n")) // a pipe, not a terminal: its content is not a confirmation
	cmd.SetArgs([]string{"--kubeconfig", "/nonexistent/kubeconfig", "uninstall"})
	err := cmd.ExecuteContext(context.Background())
	if err == nil || exitCode(err) != exitCodeError || !errors.Is(err, errNotConfirmed) || !strings.Contains(err.Error(), "--yes") {
		t.Fatalf("err %v (exit %d), want exit 2 asking for --yes", err, exitCode(err))
	}
	for _, want := range []string{"ORPHANED, NOT DELETED", "converge.dev/finalizer", "syncs.converge.dev"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("the warning does not say %q:\n%s", want, errOut.String())
		}
	}
	if out.Len() != 0 {
		t.Errorf("stdout: %q", out.String())
	}
}

func TestConfirm(t *testing.T) {
	for in, want := range map[string]bool{"yes\n": true, " yes \n": true, "y\n": false, "": false, "no\n": false} {
		if got := confirm(strings.NewReader(in), &bytes.Buffer{}); got != want {
			t.Errorf("confirm(%q) = %v, want %v", in, got, want)
		}
	}
}

// TestInstallDefaultImageIsTheCLIsRelease: a released CLI installs the daemon image of its
// own version; a development build the base's :latest (without it: every CLI installed
// :latest).
func TestInstallDefaultImageIsTheCLIsRelease(t *testing.T) {
	for v, want := range map[string]string{"v1.2.3": installer.BaseImage + ":v1.2.3", "v0.4.0-rc.1": installer.BaseImage + ":v0.4.0-rc.1",
		"dev": installer.BaseImage + ":latest", "bcf56f2-dirty": installer.BaseImage + ":latest"} {
		objs, err := installer.RenderBase(context.Background(), installer.DefaultImage(v))
		if err != nil {
			t.Fatal(err)
		}
		d := find[appsv1.Deployment](t, objs, "Deployment", installer.DaemonName)
		if got := d.Spec.Template.Spec.Containers[0].Image; got != want {
			t.Errorf("version %s: image %s, want %s", v, got, want)
		}
	}
}
