package main

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/cmd/converge/internal/scheme"
	"github.com/converge-dev/converge/status/v1alpha1"
)

var (
	kustomizationsV1  = schema.GroupVersionResource{Group: "kustomize.toolkit.fluxcd.io", Version: "v1", Resource: "kustomizations"}
	gitRepositoriesV1 = schema.GroupVersionResource{Group: "source.toolkit.fluxcd.io", Version: "v1", Resource: "gitrepositories"}
	ociRepositoriesB2 = schema.GroupVersionResource{Group: "source.toolkit.fluxcd.io", Version: "v1beta2", Resource: "ocirepositories"}
	applicationsV1A1  = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "applications"}
)

// installMigrateCRDs installs the minimal Flux and Argo CD CRDs of testdata/migrate (their
// schemas keep any field) and waits until every kind is served.
func installMigrateCRDs(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile("testdata/migrate/crds.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(env.Config, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, doc := range strings.Split(string(b), "\n---\n")[1:] {
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
			t.Fatal(err)
		}
		if err := c.Patch(ctx, obj, client.Apply, client.FieldOwner("migrate-test"), client.ForceOwnership); err != nil { //nolint:staticcheck // test CRDs as YAML
			t.Fatal(err)
		}
	}
	dc := dynamic.NewForConfigOrDie(env.Config)
	for _, gvr := range []schema.GroupVersionResource{kustomizationsV1, gitRepositoriesV1, ociRepositoriesB2, applicationsV1A1} {
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := dc.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
			return err == nil, nil
		})
		if err != nil {
			t.Fatalf("%s not served: %v", gvr, err)
		}
	}
}

// createOld creates a Flux or Argo CD object from YAML (NS is the namespace) and writes its
// status when it has one, as the old controller would have.
func createOld(t *testing.T, ns string, gvr schema.GroupVersionResource, doc string) *unstructured.Unstructured {
	t.Helper()
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(strings.ReplaceAll(doc, "NS", ns)), &obj.Object); err != nil {
		t.Fatal(err)
	}
	status, hasStatus := obj.Object["status"]
	dc := dynamic.NewForConfigOrDie(env.Config).Resource(gvr).Namespace(ns)
	ctx := context.Background()
	created, err := dc.Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if hasStatus {
		created.Object["status"] = status
		if created, err = dc.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return created
}

// getOld reads a Flux or Argo CD object.
func getOld(t *testing.T, ns string, gvr schema.GroupVersionResource, name string) *unstructured.Unstructured {
	t.Helper()
	u, err := dynamic.NewForConfigOrDie(env.Config).Resource(gvr).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// fluxFull is a GitRepository and a Kustomization setting every field a Sync translates,
// and several it does not (v1beta2's patchesStrategicMerge, kubeConfig; the source's include
// and recurseSubmodules).
const fluxFull = `apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: repo, namespace: NS}
spec:
  url: https://git.example.com/org/apps.git
  interval: 1m
  ref: {semver: ">=1.0.0 <2.0.0"}
  secretRef: {name: git-auth}
  verify: {mode: HEAD, secretRef: {name: git-keys}}
  recurseSubmodules: true
  include: [{repository: {name: other}, fromPath: deploy, toPath: other}]
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: full, namespace: NS}
spec:
  sourceRef: {kind: GitRepository, name: repo}
  path: ./deploy/prod/
  interval: 10m
  retryInterval: 2m
  timeout: 3m
  prune: true
  wait: true
  force: true
  targetNamespace: prod
  serviceAccountName: deployer
  dependsOn: [{name: infra}, {name: crds, namespace: other}]
  healthChecks: [{apiVersion: apps/v1, kind: Deployment, name: web, namespace: prod}]
  healthCheckExprs:
  - {apiVersion: example.com/v1, kind: Widget, current: "status.ready == true", failed: "status.broken == true"}
  postBuild:
    substitute: {cluster: prod, region: eu-1}
    substituteFrom: [{kind: ConfigMap, name: vars}, {kind: Secret, name: secret-vars, optional: true}]
  decryption: {provider: sops, secretRef: {name: sops-age}}
  patches:
  - {patch: "- op: add\n  path: /metadata/labels/x\n  value: y", target: {kind: Deployment, labelSelector: app=web}}
  - patch: |
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: settings}
      data: {k: v}
  images: [{name: web, newTag: "1.2.3"}, {name: db, newName: mirror.example/db, digest: "sha256:0123"}]
  namePrefix: prod-
  nameSuffix: -eu
  components: [../components/tls]
  ignoreMissingComponents: true
  commonMetadata: {labels: {team: a}, annotations: {owner: ops}}
  patchesStrategicMerge: [{apiVersion: v1, kind: ConfigMap, metadata: {name: x}}]
  ignore: [{paths: [/spec/replicas], target: {kind: Deployment, name: web}}]
  kubeConfig: {secretRef: {name: remote}}
status:
  inventory:
    entries:
    - {id: prod_web_apps_Deployment, v: v1}
    - {id: prod_web__Service, v: v1}
---
apiVersion: source.toolkit.fluxcd.io/v1beta2
kind: OCIRepository
metadata: {name: artifact, namespace: NS}
spec:
  url: oci://registry.example.com/org/manifests
  interval: 5m
  ref: {semver: "1.x"}
  layerSelector: {mediaType: application/vnd.cncf.flux.content.v1.tar+gzip, operation: extract}
  secretRef: {name: registry-auth}
  insecure: true
  verify: {provider: cosign, secretRef: {name: cosign-pub}}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: oci, namespace: NS}
spec:
  sourceRef: {kind: OCIRepository, name: artifact}
  interval: 30m
  prune: false
  suspend: true
  deletionPolicy: Orphan
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: bucket, namespace: NS}
spec:
  sourceRef: {kind: Bucket, name: objects}
  interval: 5m
  prune: true
`

// createDocs creates every document of docs in ns, choosing the resource by kind.
func createDocs(t *testing.T, ns, docs string) {
	t.Helper()
	gvrs := map[string]schema.GroupVersionResource{"GitRepository": gitRepositoriesV1, "Kustomization": kustomizationsV1,
		"OCIRepository": ociRepositoriesB2, "Application": applicationsV1A1}
	for _, doc := range strings.Split(docs, "\n---\n") {
		kind := doc[strings.Index(doc, "kind: ")+len("kind: "):]
		kind = kind[:strings.IndexByte(kind, '\n')]
		createOld(t, ns, gvrs[kind], doc)
	}
}

// TestMigrateFluxPrintsSyncs: the Syncs printed for a Kustomization on a GitRepository, one
// on an OCIRepository and one on a Bucket, field by field (golden files), the fields not
// translated on stderr and in -o json, and exit code 1 unless --allow-partial.
func TestMigrateFluxPrintsSyncs(t *testing.T) {
	installMigrateCRDs(t)
	ns := env.Namespace(t)
	createDocs(t, ns, fluxFull)

	r := cliRun(t, "migrate", "flux", "-n", ns)
	if r.code != 1 {
		t.Errorf("exit code %d, want 1 (fields not translated); stderr:\n%s", r.code, r.stderr)
	}
	golden(t, "migrate/flux.yaml", ns, r.stdout)
	golden(t, "migrate/flux-stderr.txt", ns, r.stderr)

	r = cliRun(t, "migrate", "flux", "-n", ns, "--allow-partial", "-o", "json")
	if r.code != 0 {
		t.Errorf("--allow-partial: exit code %d, want 0; stderr:\n%s", r.code, r.stderr)
	}
	var plan struct {
		Syncs         []v1alpha1.Sync
		NotTranslated []untranslated
	}
	if err := json.Unmarshal([]byte(r.stdout), &plan); err != nil {
		t.Fatalf("-o json: %v\n%s", err, r.stdout)
	}
	var names, fields []string
	for _, s := range plan.Syncs {
		names = append(names, s.Name)
	}
	for _, u := range plan.NotTranslated {
		fields = append(fields, u.Object+" "+u.Field)
	}
	want := []string{
		"GitRepository " + ns + "/repo spec.include",
		"GitRepository " + ns + "/repo spec.recurseSubmodules",
		"Kustomization " + ns + "/full spec.patchesStrategicMerge",
		"Kustomization " + ns + "/full spec.kubeConfig",
		"Kustomization " + ns + "/bucket spec.sourceRef.kind",
	}
	slices.Sort(want)
	slices.Sort(fields)
	if diff := cmp.Diff(want, fields); diff != "" {
		t.Errorf("notTranslated (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"full", "oci"}, names); diff != "" {
		t.Errorf("Syncs (-want +got):\n%s", diff)
	}
	wantBuild := v1alpha1.BuildFields{
		Patches: []v1alpha1.KustomizePatch{
			{Patch: "- op: add\n  path: /metadata/labels/x\n  value: y", Target: &v1alpha1.PatchSelector{Kind: "Deployment", LabelSelector: "app=web"}},
			{Patch: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {k: v}\n"},
		},
		Images:     []v1alpha1.KustomizeImage{{Name: "web", NewTag: "1.2.3"}, {Name: "db", NewName: "mirror.example/db", Digest: "sha256:0123"}},
		NamePrefix: "prod-", NameSuffix: "-eu", Components: []string{"../components/tls"}, IgnoreMissingComponents: true,
		CommonMetadata: &v1alpha1.CommonMetadata{Labels: map[string]string{"team": "a"}, Annotations: map[string]string{"owner": "ops"}},
	}
	if len(plan.Syncs) > 0 {
		if diff := cmp.Diff(wantBuild, plan.Syncs[0].Spec.BuildFields); diff != "" {
			t.Errorf("Sync full: build fields not translated field for field (-want +got):\n%s", diff)
		}
		wantIgnore := []v1alpha1.IgnoreRule{{Paths: []string{"/spec/replicas"}, Target: &v1alpha1.PatchSelector{Kind: "Deployment", Name: "web"}}}
		if diff := cmp.Diff(wantIgnore, plan.Syncs[0].Spec.Ignore); diff != "" {
			t.Errorf("Sync full: spec.ignore (-want +got):\n%s", diff)
		}
	}
}

// TestMigrateFluxBadInput: a Kustomization naming a source that does not exist, and one
// with a malformed field, fail with exit code 2 and an error naming the object and the
// field; no Sync is printed.
func TestMigrateFluxBadInput(t *testing.T) {
	installMigrateCRDs(t)
	ns := env.Namespace(t)
	createDocs(t, ns, `apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: orphan, namespace: NS}
spec:
  sourceRef: {kind: GitRepository, name: missing}
  interval: 5m
  prune: true
---
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: repo, namespace: NS}
spec: {url: "https://git.example.com/a.git", interval: 1m}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: malformed, namespace: NS}
spec:
  sourceRef: {kind: GitRepository, name: repo}
  interval: soon
  prune: "yes"`)

	cliRun(t, "migrate", "flux", "-n", ns, "orphan").expect(t, "missing source", 2, nil,
		[]string{"Kustomization " + ns + "/orphan: its source GitRepository " + ns + "/missing does not exist"})
	r := cliRun(t, "migrate", "flux", "-n", ns, "malformed")
	r.expect(t, "malformed fields", 2, nil, []string{"Kustomization " + ns + "/malformed: ",
		`spec.interval: want a duration such as 5m, got soon`, `spec.prune: want true or false, got yes`})
	if r.stdout != "" {
		t.Errorf("malformed: printed Syncs:\n%s", r.stdout)
	}
	cliRun(t, "migrate", "flux", "-n", ns, "nothere").expect(t, "no such Kustomization", 2, nil,
		[]string{"Kustomization " + ns + "/nothere", "not found"})
}

// fluxSimple is a Kustomization every field of which translates, with its GitRepository.
const fluxSimple = `apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: repo, namespace: NS}
spec: {url: "https://git.example.com/a.git", interval: 5m, ref: {branch: main}}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: app, namespace: NS}
spec:
  sourceRef: {kind: GitRepository, name: repo}
  interval: 5m
  prune: true
status:
  inventory:
    entries: [{id: NS_a__ConfigMap, v: v1}]`

// TestMigrateDryRunWritesNothing: --apply --dry-run prints the plan (the Sync, validated by
// the API server, and the Kustomization to suspend) and writes nothing: no Sync, the
// Kustomization not suspended.
func TestMigrateDryRunWritesNothing(t *testing.T) {
	installMigrateCRDs(t)
	installSyncCRD(t)
	ns := env.Namespace(t)
	createDocs(t, ns, fluxSimple)
	before := getOld(t, ns, kustomizationsV1, "app")

	cliRun(t, "migrate", "flux", "-n", ns, "--apply", "--dry-run").expect(t, "dry run", 0, []string{"kind: Sync", "name: app"},
		[]string{"Sync " + ns + "/app would be applied (dry run)",
			"Kustomization " + ns + "/app: would be suspended once its Sync is Ready and lists every object it applied (dry run)"})
	assertNoSync(t, ns, "app")
	if after := getOld(t, ns, kustomizationsV1, "app"); after.GetResourceVersion() != before.GetResourceVersion() {
		t.Errorf("the dry run changed the Kustomization: %v", after.Object["spec"])
	}
}

func assertNoSync(t *testing.T, ns, name string) {
	t.Helper()
	c, err := client.New(env.Config, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	var s v1alpha1.Sync
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &s); err == nil {
		t.Errorf("Sync %s/%s exists: %+v", ns, name, s.Spec)
	}
}

// TestMigrateApplyLeavesFluxRunning: without a daemon the Sync never becomes Ready, so
// --apply applies it, waits --timeout, exits 2 and leaves the Kustomization running (not
// suspended). A partial translation is not applied at all without --allow-partial.
func TestMigrateApplyLeavesFluxRunning(t *testing.T) {
	installMigrateCRDs(t)
	installSyncCRD(t)
	ns := env.Namespace(t)
	createDocs(t, ns, fluxSimple)

	cliRun(t, "migrate", "flux", "-n", ns, "app", "--apply", "--timeout", "2s").expect(t, "never Ready", 2, []string{"name: app"},
		[]string{"Sync " + ns + "/app: not Ready within 2s", "Kustomization " + ns + "/app left running"})
	if suspended, _, _ := unstructured.NestedBool(getOld(t, ns, kustomizationsV1, "app").Object, "spec", "suspend"); suspended {
		t.Error("the Kustomization was suspended though its Sync never became Ready")
	}
	c, err := client.New(env.Config, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	var s v1alpha1.Sync
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "app"}, &s); err != nil {
		t.Fatalf("the Sync was not applied: %v", err)
	}
	if !s.Spec.Adopt || s.Spec.Source.Git.URL != "https://git.example.com/a.git" {
		t.Errorf("applied Sync: %+v", s.Spec)
	}

	createDocs(t, ns, `apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: patched, namespace: NS}
spec:
  sourceRef: {kind: GitRepository, name: repo}
  interval: 5m
  prune: true
  patchesJson6902: [{target: {kind: Deployment, name: web}, patch: [{op: remove, path: /spec/replicas}]}]`)
	cliRun(t, "migrate", "flux", "-n", ns, "patched", "--apply").expect(t, "partial", 1, nil,
		[]string{"spec.patchesJson6902: ", "nothing applied: some fields are not translated"})
	assertNoSync(t, ns, "patched")
}

// argoApps are Applications: one that translates (kustomize images and namePrefix,
// ignoreDifferences) with a few fields that do not (a CreateNamespace sync option, a
// project), one deploying to another cluster, one with several sources and one rendering a
// Helm chart.
const argoApps = `apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: guestbook, namespace: NS, finalizers: [resources-finalizer.argocd.argoproj.io]}
spec:
  project: team-a
  source:
    repoURL: https://git.example.com/org/apps.git
    targetRevision: v1.4.0
    path: guestbook/overlays/prod
    kustomize: {images: ["web=web:1.4.0"], namePrefix: prod-}
  destination: {name: in-cluster, namespace: guestbook}
  syncPolicy:
    automated: {prune: true, selfHeal: true, allowEmpty: true}
    syncOptions: [ServerSideApply=true, CreateNamespace=true]
  ignoreDifferences: [{group: apps, kind: Deployment, jsonPointers: [/spec/replicas]}]
status:
  resources: [{group: apps, version: v1, kind: Deployment, namespace: guestbook, name: web}]
---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: remote, namespace: NS}
spec:
  source: {repoURL: https://git.example.com/org/apps.git, targetRevision: HEAD, path: remote}
  destination: {server: https://prod.example.com:6443, namespace: web}
---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: multi, namespace: NS}
spec:
  sources: [{repoURL: https://git.example.com/a.git, path: a}, {repoURL: https://git.example.com/b.git, path: b}]
  destination: {server: https://kubernetes.default.svc}
---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: chart, namespace: NS}
spec:
  source: {repoURL: https://charts.example.com, chart: podinfo, targetRevision: 6.5.0, helm: {releaseName: podinfo}}
  destination: {server: https://kubernetes.default.svc, namespace: podinfo}`

// TestMigrateArgoCDPrintsSyncs: the Sync printed for an Application with one git source,
// field by field (golden files), and the fields and Applications not translated, exit 1.
func TestMigrateArgoCDPrintsSyncs(t *testing.T) {
	installMigrateCRDs(t)
	ns := env.Namespace(t)
	createDocs(t, ns, argoApps)

	r := cliRun(t, "migrate", "argocd", "-n", ns)
	if r.code != 1 {
		t.Errorf("exit code %d, want 1 (fields not translated); stderr:\n%s", r.code, r.stderr)
	}
	golden(t, "migrate/argocd.yaml", ns, r.stdout)
	golden(t, "migrate/argocd-stderr.txt", ns, r.stderr)
}
