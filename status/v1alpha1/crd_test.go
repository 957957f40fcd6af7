package v1alpha1_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/deploy"
	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// These tests hold the generated CRD (deploy/crd, from the markers in types.go) to what the
// API server accepts, rejects and defaults, so a marker lost or changed in the types shows
// here rather than in a user's cluster.

var env *cluster.Cluster

func TestMain(m *testing.M) { cluster.Main(m, cluster.API, &env) }

var installOnce sync.Once

// setup installs deploy.SyncCRD once and returns a client and a fresh namespace.
func setup(t *testing.T) (client.Client, string) {
	t.Helper()
	cluster.Require(t, env)
	c := env.Client(t, v1alpha1.AddToScheme, apiextensionsv1.AddToScheme)
	installOnce.Do(func() {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(deploy.SyncCRD, crd); err != nil {
			t.Fatalf("deploy.SyncCRD: %v", err)
		}
		if err := c.Create(t.Context(), crd); err != nil {
			t.Fatalf("create CRD: %v", err)
		}
	})
	// The kind is served once a list of it succeeds.
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return c.List(ctx, &v1alpha1.SyncList{}) == nil, nil
	})
	if err != nil {
		t.Fatalf("Syncs not served: %v", err)
	}
	return c, env.Namespace(t)
}

// minimal is the least a user writes: a name and a git URL.
func minimal(ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(),
		"kind":       "Sync",
		"metadata":   map[string]any{"name": name, "namespace": ns},
		"spec":       map[string]any{"source": map[string]any{"git": map[string]any{"url": "https://git.example/apps.git"}}},
	}}
	return u
}

// ociOnly makes u's source the OCI source oci.
func ociOnly(t *testing.T, u *unstructured.Unstructured, oci map[string]any) {
	t.Helper()
	set(t, u, map[string]any{"oci": oci}, "spec", "source")
}

func set(t *testing.T, u *unstructured.Unstructured, value any, path ...string) {
	t.Helper()
	if err := unstructured.SetNestedField(u.Object, value, path...); err != nil {
		t.Fatal(err)
	}
}

// TestSchemaRejects sends invalid Syncs: each is refused as Invalid, naming the field.
func TestSchemaRejects(t *testing.T) {
	c, ns := setup(t)
	cases := []struct {
		name  string
		edit  func(*unstructured.Unstructured)
		field string
	}{
		{"interval not a duration", func(u *unstructured.Unstructured) { set(t, u, "5 minutes", "spec", "interval") }, "spec.interval"},
		{"interval without unit", func(u *unstructured.Unstructured) { set(t, u, "300", "spec", "interval") }, "spec.interval"},
		{"interval in days", func(u *unstructured.Unstructured) { set(t, u, "1d", "spec", "interval") }, "spec.interval"},
		{"retryInterval negative", func(u *unstructured.Unstructured) { set(t, u, "-1s", "spec", "retryInterval") }, "spec.retryInterval"},
		{"timeout not a duration", func(u *unstructured.Unstructured) { set(t, u, "soon", "spec", "timeout") }, "spec.timeout"},
		// Durations Go cannot hold failed the daemon's decoding of every Sync (a watch of all
		// Syncs stopped); below 1s a Sync reconciles in a hot loop; a long timeout holds a worker.
		{"interval over Go's range", func(u *unstructured.Unstructured) { set(t, u, "3000000h", "spec", "interval") }, "spec.interval"},
		{"interval of many digits", func(u *unstructured.Unstructured) { set(t, u, "99999999999999999999s", "spec", "interval") }, "spec.interval"},
		{"interval zero", func(u *unstructured.Unstructured) { set(t, u, "0s", "spec", "interval") }, "spec.interval"},
		{"interval 1ms", func(u *unstructured.Unstructured) { set(t, u, "1ms", "spec", "interval") }, "spec.interval"},
		// Below 2s a Sync lists its git refs every second and spends its namespace's workers.
		{"interval 1s", func(u *unstructured.Unstructured) { set(t, u, "1s", "spec", "interval") }, "spec.interval"},
		{"interval 1.9s", func(u *unstructured.Unstructured) { set(t, u, "1.9s", "spec", "interval") }, "spec.interval"},
		{"retryInterval 999ms", func(u *unstructured.Unstructured) { set(t, u, "999ms", "spec", "retryInterval") }, "spec.retryInterval"},
		{"retryInterval 1ms", func(u *unstructured.Unstructured) { set(t, u, "1ms", "spec", "retryInterval") }, "spec.retryInterval"},
		{"retryInterval over Go's range", func(u *unstructured.Unstructured) { set(t, u, "3000000h", "spec", "retryInterval") }, "spec.retryInterval"},
		{"timeout over 1h", func(u *unstructured.Unstructured) { set(t, u, "1000h", "spec", "timeout") }, "spec.timeout"},
		{"driftPolicy unknown", func(u *unstructured.Unstructured) { set(t, u, "Ignore", "spec", "driftPolicy") }, "spec.driftPolicy"},
		{"driftPolicyKinds twice the same kind", func(u *unstructured.Unstructured) {
			set(t, u, []any{map[string]any{"kind": "ConfigMap", "policy": "Correct"}, map[string]any{"group": "", "kind": "ConfigMap", "policy": "Report"}},
				"spec", "driftPolicyKinds")
		}, "spec.driftPolicyKinds"},
		{"driftPolicyKinds policy unknown", func(u *unstructured.Unstructured) {
			set(t, u, []any{map[string]any{"group": "apps", "kind": "Deployment", "policy": "report"}}, "spec", "driftPolicyKinds")
		}, "spec.driftPolicyKinds[0].policy"},
		{"deletionPolicy unknown", func(u *unstructured.Unstructured) { set(t, u, "Keep", "spec", "deletionPolicy") }, "spec.deletionPolicy"},
		{"deletionPolicy lower case", func(u *unstructured.Unstructured) { set(t, u, "orphan", "spec", "deletionPolicy") }, "spec.deletionPolicy"},
		{"deletionPolicy empty", func(u *unstructured.Unstructured) { set(t, u, "", "spec", "deletionPolicy") }, "spec.deletionPolicy"},
		{"pruneBudget negative", func(u *unstructured.Unstructured) { set(t, u, int64(-1), "spec", "pruneBudget") }, "spec.pruneBudget"},
		{"targetNamespace too long", func(u *unstructured.Unstructured) { set(t, u, strings.Repeat("a", 64), "spec", "targetNamespace") }, "spec.targetNamespace"},
		// A ServiceAccount name is a DNS-1123 subdomain; "b:c" would make the impersonated
		// user system:serviceaccount:<ns>:b:c, which no service account is.
		{"serviceAccountName with a colon", func(u *unstructured.Unstructured) { set(t, u, "b:c", "spec", "serviceAccountName") }, "spec.serviceAccountName"},
		{"serviceAccountName upper case", func(u *unstructured.Unstructured) { set(t, u, "Deployer", "spec", "serviceAccountName") }, "spec.serviceAccountName"},
		{"serviceAccountName too long", func(u *unstructured.Unstructured) { set(t, u, strings.Repeat("a", 254), "spec", "serviceAccountName") }, "spec.serviceAccountName"},
		{"url empty", func(u *unstructured.Unstructured) { set(t, u, "", "spec", "source", "git", "url") }, "spec.source.git.url"},
		{"neither git nor oci", func(u *unstructured.Unstructured) { set(t, u, map[string]any{}, "spec", "source") }, "spec.source"},
		{"both git and oci", func(u *unstructured.Unstructured) {
			set(t, u, map[string]any{"url": "oci://registry.example/apps"}, "spec", "source", "oci")
		}, "spec.source"},
		{"oci url without scheme", func(u *unstructured.Unstructured) { ociOnly(t, u, map[string]any{"url": "registry.example/apps"}) }, "spec.source.oci.url"},
		{"oci url with a tag", func(u *unstructured.Unstructured) {
			ociOnly(t, u, map[string]any{"url": "oci://registry.example/apps:v1"})
		}, "spec.source.oci.url"},
		{"oci two refs", func(u *unstructured.Unstructured) {
			ociOnly(t, u, map[string]any{"url": "oci://registry.example/apps", "ref": map[string]any{"tag": "v1", "semver": "1.x"}})
		}, "spec.source.oci.ref"},
		{"oci short digest", func(u *unstructured.Unstructured) {
			ociOnly(t, u, map[string]any{"url": "oci://registry.example/apps", "ref": map[string]any{"digest": "sha256:abc"}})
		}, "spec.source.oci.ref.digest"},
		{"oci layer operation unknown", func(u *unstructured.Unstructured) {
			ociOnly(t, u, map[string]any{"url": "oci://registry.example/apps", "layerSelector": map[string]any{"operation": "untar"}})
		}, "spec.source.oci.layerSelector.operation"},
		{"two refs", func(u *unstructured.Unstructured) {
			set(t, u, map[string]any{"branch": "main", "tag": "v1"}, "spec", "source", "git", "ref")
		}, "spec.source.git.ref"},
		{"short commit", func(u *unstructured.Unstructured) { set(t, u, "abc123", "spec", "source", "git", "ref", "commit") }, "spec.source.git.ref.commit"},
		{"webhook secret unnamed", func(u *unstructured.Unstructured) {
			set(t, u, map[string]any{"name": ""}, "spec", "webhook", "secretRef")
		}, "spec.webhook.secretRef.name"},
		{"webhook without secretRef", func(u *unstructured.Unstructured) { set(t, u, map[string]any{}, "spec", "webhook") }, "spec.webhook.secretRef"},
		{"healthCheck without name", func(u *unstructured.Unstructured) {
			set(t, u, []any{map[string]any{"kind": "Widget"}}, "spec", "healthChecks")
		}, "spec.healthChecks[0].name"},
		{"healthCheck kind empty", func(u *unstructured.Unstructured) {
			set(t, u, []any{map[string]any{"kind": "", "name": "w"}}, "spec", "healthChecks")
		}, "spec.healthChecks[0].kind"},
		{"healthCheckExpr without current", func(u *unstructured.Unstructured) {
			set(t, u, []any{map[string]any{"apiVersion": "example.com/v1", "kind": "Widget", "failed": "true"}}, "spec", "healthCheckExprs")
		}, "spec.healthCheckExprs[0].current"},
		{"healthCheckExpr current empty", func(u *unstructured.Unstructured) {
			set(t, u, []any{map[string]any{"apiVersion": "example.com/v1", "kind": "Widget", "current": ""}}, "spec", "healthCheckExprs")
		}, "spec.healthCheckExprs[0].current"},
		{"healthCheckExpr without kind", func(u *unstructured.Unstructured) {
			set(t, u, []any{map[string]any{"apiVersion": "example.com/v1", "current": "true"}}, "spec", "healthCheckExprs")
		}, "spec.healthCheckExprs[0].kind"},
		{"healthCheckExpr without apiVersion", func(u *unstructured.Unstructured) {
			set(t, u, []any{map[string]any{"kind": "Widget", "current": "true"}}, "spec", "healthCheckExprs")
		}, "spec.healthCheckExprs[0].apiVersion"},
		{"dependsOn without name", func(u *unstructured.Unstructured) {
			set(t, u, []any{map[string]any{"namespace": "infra"}}, "spec", "dependsOn")
		}, "spec.dependsOn[0].name"},
		{"substitute variable starting with a digit", func(u *unstructured.Unstructured) {
			set(t, u, map[string]any{"1st": "x"}, "spec", "postBuild", "substitute")
		}, "spec.postBuild.substitute"},
		{"substitute variable with a dash", func(u *unstructured.Unstructured) {
			set(t, u, map[string]any{"cluster-name": "x"}, "spec", "postBuild", "substitute")
		}, "spec.postBuild.substitute"},
		{"substituteFrom of another kind", func(u *unstructured.Unstructured) {
			set(t, u, []any{map[string]any{"kind": "Pod", "name": "vars"}}, "spec", "postBuild", "substituteFrom")
		}, "spec.postBuild.substituteFrom[0].kind"},
		{"decryption of another provider", func(u *unstructured.Unstructured) {
			set(t, u, map[string]any{"provider": "vault"}, "spec", "decryption")
		}, "spec.decryption.provider"},
		{"helm valuesFrom of another kind", func(u *unstructured.Unstructured) {
			set(t, u, []any{map[string]any{"kind": "Pod", "name": "vals"}}, "spec", "source", "helm", "valuesFrom")
		}, "spec.source.helm.valuesFrom[0].kind"},
		{"helm valuesFrom targetPath with a space", func(u *unstructured.Unstructured) {
			set(t, u, []any{map[string]any{"kind": "ConfigMap", "name": "vals", "targetPath": "a b"}}, "spec", "source", "helm", "valuesFrom")
		}, "spec.source.helm.valuesFrom[0].targetPath"},
		{"helm postRenderers patch empty", func(u *unstructured.Unstructured) {
			set(t, u, []any{map[string]any{"kustomize": map[string]any{"patches": []any{map[string]any{"patch": ""}}}}}, "spec", "source", "helm", "postRenderers")
		}, "spec.source.helm.postRenderers[0].kustomize.patches[0].patch"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			u := minimal(ns, "bad")
			tc.edit(u)
			err := c.Create(t.Context(), u)
			if !apierrors.IsInvalid(err) {
				t.Fatalf("create: got %v, want Invalid naming %s", err, tc.field)
			}
			if !causedBy(err, tc.field) {
				t.Fatalf("create: %v\nnames no cause %s", err, tc.field)
			}
		})
	}
}

// causedBy reports whether an Invalid error lists field among its causes.
func causedBy(err error, field string) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) || st.Status().Details == nil {
		return false
	}
	for _, cause := range st.Status().Details.Causes {
		if cause.Field == field {
			return true
		}
	}
	return false
}

// TestSchemaAccepts sends Syncs the hand-written CRD accepted (every field set, and the edge
// values a user may have stored: fractional and compound durations, an empty path, a git
// secretRef with an empty name, an empty serviceAccountName); the generated CRD accepts them too. A zero interval, once
// accepted, is refused now (TestSchemaRejects); the daemon still reads a stored one as 5m.
func TestSchemaAccepts(t *testing.T) {
	c, ns := setup(t)
	full := minimal(ns, "full")
	set(t, full, map[string]any{
		"source": map[string]any{"git": map[string]any{
			"url":       "ssh://git@git.example/apps.git",
			"ref":       map[string]any{"commit": strings.Repeat("0a", 20)},
			"secretRef": map[string]any{"name": "git"},
		}},
		"path": "overlays/prod", "interval": "1h30m", "retryInterval": "1.5s", "timeout": "59m30.5s",
		"prune": false, "wait": false, "targetNamespace": strings.Repeat("a", 63),
		"serviceAccountName": "deployer", "suspend": true, "deletionPolicy": "Orphan",
		"pruneBudget": int64(0), "allowEmpty": true, "force": true, "adopt": true,
		"webhook": map[string]any{"secretRef": map[string]any{"name": "hook"}},
		"healthChecks": []any{
			map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "namespace": "other"},
			map[string]any{"kind": "ConfigMap", "name": "settings"},
		},
		"healthCheckExprs": []any{map[string]any{
			"apiVersion": "example.com/v1", "kind": "Widget",
			"current":    "status.conditions.exists(c, c.type == 'Synced' && c.status == 'True')",
			"inProgress": "status.phase == 'Pending'",
			"failed":     "status.conditions.exists(c, c.type == 'Synced' && c.status == 'False')",
		}},
		"dependsOn": []any{map[string]any{"name": "infra"}, map[string]any{"name": "crds", "namespace": "platform"}},
		"postBuild": map[string]any{
			"substitute":     map[string]any{"cluster_name": "prod", "_REGION2": "eu"},
			"substituteFrom": []any{map[string]any{"kind": "ConfigMap", "name": "vars"}, map[string]any{"kind": "Secret", "name": "creds", "optional": true}},
			"strict":         true,
		},
		"decryption":  map[string]any{"provider": "sops", "secretRef": map[string]any{"name": "sops-age"}},
		"driftPolicy": "Report",
		"driftPolicyKinds": []any{map[string]any{"kind": "ConfigMap", "policy": "Correct"},
			map[string]any{"group": "apps", "kind": "Deployment", "policy": "Report"}},
	}, "spec")
	edge := minimal(ns, "edge")
	set(t, edge, "", "spec", "path")
	set(t, edge, map[string]any{}, "spec", "source", "git", "ref")
	set(t, edge, map[string]any{"name": ""}, "spec", "source", "git", "secretRef")
	set(t, edge, "", "spec", "serviceAccountName") // explicitly unset
	oci := minimal(ns, "oci")
	ociOnly(t, oci, map[string]any{
		"url": "oci://registry.example:5000/team/apps", "ref": map[string]any{"semver": ">=1.0.0 <2.0.0"},
		"layerSelector": map[string]any{"mediaType": "application/vnd.cncf.flux.content.v1.tar+gzip", "operation": "copy"},
		"secretRef":     map[string]any{"name": "regcred"}, "certSecretRef": map[string]any{"name": "ca"}, "insecure": true,
	})
	helm := minimal(ns, "helm")
	set(t, helm, map[string]any{
		"valuesFrom": []any{map[string]any{"kind": "ConfigMap", "name": "vals"},
			map[string]any{"kind": "Secret", "name": "db", "valuesKey": "db.yaml", "targetPath": `ingress.annotations.example\.com/x[0]`, "optional": true}},
		"postRenderers": []any{map[string]any{"kustomize": map[string]any{
			"patches": []any{map[string]any{"patch": "- {op: remove, path: /spec/replicas}", "target": map[string]any{
				"group": "apps", "version": "v1", "kind": "Deployment", "name": "web", "namespace": "apps",
				"labelSelector": "app=web", "annotationSelector": "team=a"}}},
			"images": []any{map[string]any{"name": "nginx", "newName": "registry.example/nginx", "newTag": "1.27", "digest": "sha256:" + strings.Repeat("0", 64)}},
		}}},
	}, "spec", "source", "helm")
	for _, u := range []*unstructured.Unstructured{full, edge, oci, helm} {
		if err := c.Create(t.Context(), u); err != nil {
			t.Fatalf("create %s: %v", u.GetName(), err)
		}
	}
	got := &v1alpha1.Sync{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(full), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Interval.Duration != 90*time.Minute || got.Spec.Webhook == nil || got.Spec.DeletionPolicy != v1alpha1.DeletionPolicyOrphan ||
		got.Spec.Prune || got.Spec.Wait || !got.Spec.Adopt || got.Spec.Source.Git.Ref.Commit == "" ||
		len(got.Spec.HealthChecks) != 2 || got.Spec.HealthChecks[0].Namespace != "other" || got.Spec.HealthChecks[1].APIVersion != "" ||
		len(got.Spec.HealthCheckExprs) != 1 || got.Spec.HealthCheckExprs[0].InProgress == "" || got.Spec.HealthCheckExprs[0].Failed == "" {
		t.Fatalf("spec did not round-trip (a field pruned by the schema?): %+v", got.Spec)
	}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(oci), got); err != nil {
		t.Fatal(err)
	}
	if o := got.Spec.Source.OCI; o == nil || o.Ref.SemVer == "" || o.LayerSelector == nil || o.LayerSelector.Operation != "copy" ||
		o.SecretRef == nil || o.CertSecretRef == nil || !o.Insecure || got.Spec.Source.Git != nil {
		t.Fatalf("oci source did not round-trip: %+v", got.Spec.Source)
	}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(helm), got); err != nil {
		t.Fatal(err)
	}
	if h := got.Spec.Source.Helm; h == nil || len(h.ValuesFrom) != 2 || !h.ValuesFrom[1].Optional || h.ValuesFrom[1].TargetPath == "" ||
		len(h.PostRenderers) != 1 || h.PostRenderers[0].Kustomize == nil || h.PostRenderers[0].Kustomize.Patches[0].Target.AnnotationSelector == "" ||
		h.PostRenderers[0].Kustomize.Images[0].Digest == "" {
		t.Fatalf("helm source did not round-trip: %+v", got.Spec.Source.Helm)
	}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(edge), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Interval.Duration != 5*time.Minute || got.Spec.Path != "" {
		t.Fatalf("explicit values were replaced: interval %s, path %q", got.Spec.Interval.Duration, got.Spec.Path)
	}
}

// TestStatusRoundTrip writes a full status through the status subresource and reads it back:
// the schema keeps every field (the inventory's recovery copy above all), and a write to
// the Sync itself does not change the status.
func TestStatusRoundTrip(t *testing.T) {
	c, ns := setup(t)
	s := &v1alpha1.Sync{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec:       v1alpha1.SyncSpec{Source: v1alpha1.Source{Git: &v1alpha1.GitSource{URL: "https://git.example/apps.git"}}},
	}
	if err := c.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	want := v1alpha1.SyncStatus{
		ObservedGeneration: s.Generation,
		Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue,
			Reason: "ReconciliationSucceeded", Message: "applied", ObservedGeneration: s.Generation, LastTransitionTime: now}},
		LastAppliedRevision: "main@sha1:abc", LastAttemptedRevision: "main@sha1:abc", LastHandledRequest: "now",
		Inventory: &v1alpha1.InventoryStatus{Name: "web-inventory", Entries: 2, Objects: []v1alpha1.InventoryObject{
			{ID: "apps_web__ConfigMap", UID: "u1"}, {ID: "_apps__Namespace"}}},
		Summary: &v1alpha1.Summary{Created: 1, Configured: 2, Unchanged: 3, Pruned: 4, Skipped: 5, Failed: 6, NotReady: 7},
	}
	s.Status = want
	if err := c.Status().Update(t.Context(), s); err != nil {
		t.Fatalf("status update: %v", err)
	}
	s.Spec.Suspend = true
	s.Status = v1alpha1.SyncStatus{}
	if err := c.Update(t.Context(), s); err != nil {
		t.Fatalf("update: %v", err)
	}
	got := &v1alpha1.Sync{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(s), got); err != nil {
		t.Fatal(err)
	}
	gotJSON, _ := yaml.Marshal(got.Status)
	wantJSON, _ := yaml.Marshal(want)
	if string(gotJSON) != string(wantJSON) {
		t.Fatalf("status read back:\n%s\nwant:\n%s", gotJSON, wantJSON)
	}
}

// TestDefaults checks that the API server fills in every default, for a Sync written as YAML
// (no field but the source) and for one built in Go, whose zero Interval is left out of the
// request; the daemon relies on these and has no defaults of its own.
func TestDefaults(t *testing.T) {
	c, ns := setup(t)
	if err := c.Create(t.Context(), minimal(ns, "yaml")); err != nil {
		t.Fatal(err)
	}
	goSync := &v1alpha1.Sync{
		ObjectMeta: metav1.ObjectMeta{Name: "go", Namespace: ns},
		Spec:       v1alpha1.SyncSpec{Source: v1alpha1.Source{Git: &v1alpha1.GitSource{URL: "https://git.example/apps.git"}}, Prune: true, Wait: true},
	}
	if err := c.Create(t.Context(), goSync); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"yaml", "go"} {
		got := &v1alpha1.Sync{}
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, got); err != nil {
			t.Fatal(err)
		}
		sp := got.Spec
		if sp.Path != "." || sp.Interval.Duration != 5*time.Minute || sp.DeletionPolicy != v1alpha1.DeletionPolicyDelete ||
			!sp.Prune || !sp.Wait || sp.Suspend {
			t.Errorf("%s: defaults not filled in: path %q interval %s deletionPolicy %q prune %t wait %t suspend %t",
				name, sp.Path, sp.Interval.Duration, sp.DeletionPolicy, sp.Prune, sp.Wait, sp.Suspend)
		}
	}
}
