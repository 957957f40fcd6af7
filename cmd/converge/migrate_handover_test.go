package main

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/engine"
)

// applyAsOldTool creates the ConfigMaps a and b of the fixture's namespace as Flux's or Argo
// CD's controller does (server-side apply under its field manager, with its tracking label)
// and returns their UIDs.
func applyAsOldTool(t *testing.T, f *fixture, manager string) map[string]string {
	t.Helper()
	uids := map[string]string{}
	for _, name := range []string{"a", "b"} {
		cm := &unstructured.Unstructured{}
		cm.SetAPIVersion("v1")
		cm.SetKind("ConfigMap")
		cm.SetNamespace(f.ns)
		cm.SetName(name)
		cm.SetLabels(map[string]string{"app.kubernetes.io/managed-by": manager})
		if manager == "kustomize-controller" {
			cm.SetLabels(map[string]string{"app.kubernetes.io/managed-by": manager,
				"kustomize.toolkit.fluxcd.io/name": "app", "kustomize.toolkit.fluxcd.io/namespace": f.ns})
		} else {
			cm.SetAnnotations(map[string]string{"argocd.argoproj.io/tracking-id": "app:/ConfigMap:" + f.ns + "/" + name})
		}
		data := map[string]any{"k": "v"}
		if name == "a" {
			data = map[string]any{"version": "1"}
		}
		cm.Object["data"] = data
		if err := f.c.Patch(context.Background(), cm, client.Apply, client.FieldOwner(manager)); err != nil { //nolint:staticcheck // as the old tool applies
			t.Fatal(err)
		}
		uids[name] = string(cm.GetUID())
	}
	return uids
}

// applyDocAs applies the YAML object doc (NS its namespace) to the fixture's namespace as
// an old tool does: server-side apply under manager.
func applyDocAs(t *testing.T, f *fixture, doc, manager string) {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(strings.ReplaceAll(doc, "NS", f.ns)), &u.Object); err != nil {
		t.Fatal(err)
	}
	if err := f.c.Patch(context.Background(), u, client.Apply, client.FieldOwner(manager)); err != nil { //nolint:staticcheck // as the old tool applies
		t.Fatal(err)
	}
}

// createFluxKustomization creates the GitRepository repo of the fixture's repository and the
// Kustomization app on it, pruning, whose status.inventory lists the ConfigMaps names of the
// fixture's namespace.
func createFluxKustomization(t *testing.T, f *fixture, names ...string) {
	t.Helper()
	var entries []string
	for _, n := range names {
		entries = append(entries, "{id: NS_"+n+"__ConfigMap, v: v1}")
	}
	createDocs(t, f.ns, `apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: repo, namespace: NS}
spec: {url: "`+f.git.RepoURL("app")+`", interval: 1m, ref: {branch: main}}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: app, namespace: NS}
spec:
  sourceRef: {kind: GitRepository, name: repo}
  interval: 1m
  path: ./
  prune: true
status:
  inventory:
    entries: [`+strings.Join(entries, ", ")+`]`)
}

// assertAdopted fails t unless a and b keep their UIDs, carry the Sync's owner annotation,
// and no longer carry the old tool's field manager nor its tracking labels and annotations.
func assertAdopted(t *testing.T, f *fixture, uids map[string]string, manager string) {
	t.Helper()
	for name, uid := range uids {
		cm := &corev1.ConfigMap{}
		if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: name}, cm); err != nil {
			t.Fatal(err)
		}
		if string(cm.UID) != uid {
			t.Errorf("ConfigMap %s was recreated: UID %s, was %s", name, cm.UID, uid)
		}
		if cm.Annotations[engine.OwnerAnnotation] == "" {
			t.Errorf("ConfigMap %s not adopted: annotations %v", name, cm.Annotations)
		}
		for _, mf := range cm.ManagedFields {
			if mf.Manager == manager {
				t.Errorf("ConfigMap %s: %s still manages fields (%s)", name, manager, mf.Operation)
			}
		}
		for _, k := range []string{"kustomize.toolkit.fluxcd.io/name", "kustomize.toolkit.fluxcd.io/namespace"} {
			if _, ok := cm.Labels[k]; ok {
				t.Errorf("ConfigMap %s: Flux's tracking label %s stayed", name, k)
			}
		}
		if _, ok := cm.Annotations["argocd.argoproj.io/tracking-id"]; ok {
			t.Errorf("ConfigMap %s: Argo CD's tracking annotation stayed", name)
		}
	}
}

// TestMigrateFluxHandOver: with a daemon running, --apply waits until the Sync is Ready. A
// Kustomization whose inventory lists an object the Sync does not render (c) stays running
// and the missing object is named (exit 2); once its inventory matches what the Sync adopted,
// the same command suspends it. No object is recreated (UIDs unchanged), and
// kustomize-controller's fields and Flux's tracking labels are handed over.
func TestMigrateFluxHandOver(t *testing.T) {
	f := newFixture(t)
	installMigrateCRDs(t)
	installSyncCRD(t)
	f.publish(map[string]string{"a.yaml": strings.ReplaceAll(cmA, "VERSION", "1"), "b.yaml": cmB})
	uids := applyAsOldTool(t, f, "kustomize-controller")
	// c is Flux's, in the cluster, and not in the Sync's source.
	applyDocAs(t, f, strings.Replace(cmB, "name: b", "name: c", 1), "kustomize-controller")
	createFluxKustomization(t, f, "a", "b", "c")
	f.startDaemon(env.Config)

	cliRun(t, "migrate", "flux", "-n", f.ns, "app", "--apply", "--timeout", "2m").expect(t, "an object missing", 2, nil,
		[]string{"its inventory does not list 1 objects Kustomization " + f.ns + "/app applied: " + f.ns + "_c__ConfigMap",
			"Kustomization " + f.ns + "/app left running"})
	if suspended, _, _ := unstructured.NestedBool(getOld(t, f.ns, kustomizationsV1, "app").Object, "spec", "suspend"); suspended {
		t.Fatal("the Kustomization was suspended though the Sync does not list c")
	}
	assertAdopted(t, f, uids, "kustomize-controller")

	ks := getOld(t, f.ns, kustomizationsV1, "app")
	_ = unstructured.SetNestedSlice(ks.Object, []any{map[string]any{"id": f.ns + "_a__ConfigMap", "v": "v1"},
		map[string]any{"id": f.ns + "_b__ConfigMap", "v": "v1"}}, "status", "inventory", "entries")
	if _, err := dynamic.NewForConfigOrDie(env.Config).Resource(kustomizationsV1).Namespace(f.ns).UpdateStatus(context.Background(), ks, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cliRun(t, "migrate", "flux", "-n", f.ns, "app", "--apply", "--timeout", "2m").expect(t, "adopted", 0, nil,
		[]string{"Sync " + f.ns + "/app applied, Ready and listing every object; Kustomization " + f.ns + "/app suspended"})
	if suspended, _, _ := unstructured.NestedBool(getOld(t, f.ns, kustomizationsV1, "app").Object, "spec", "suspend"); !suspended {
		t.Error("the Kustomization was not suspended")
	}
	assertAdopted(t, f, uids, "kustomize-controller")
}

// TestMigrateArgoCDHandOver: an Application's automated sync is turned off only once its
// Sync is Ready and lists every object of status.resources, one not in the cluster yet
// included (Argo CD lists what it has yet to create); the objects keep their UIDs,
// and argocd-controller's fields and Argo CD's tracking annotation are handed over.
func TestMigrateArgoCDHandOver(t *testing.T) {
	f := newFixture(t)
	installMigrateCRDs(t)
	installSyncCRD(t)
	f.publish(map[string]string{"a.yaml": strings.ReplaceAll(cmA, "VERSION", "1"), "b.yaml": cmB})
	uids := applyAsOldTool(t, f, "argocd-controller")
	createDocs(t, f.ns, `apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: app, namespace: NS}
spec:
  project: default
  source: {repoURL: "`+f.git.RepoURL("app")+`", targetRevision: refs/heads/main, path: ., directory: {recurse: true}}
  destination: {server: "https://kubernetes.default.svc"}
  syncPolicy: {automated: {prune: true, selfHeal: true}, syncOptions: [ServerSideApply=true]}
status:
  resources:
  - {version: v1, kind: ConfigMap, namespace: NS, name: a}
  - {version: v1, kind: ConfigMap, namespace: NS, name: b}
  - {version: v1, kind: ConfigMap, namespace: NS, name: later}`)
	f.startDaemon(env.Config)

	// later is one Argo CD has yet to create (a later wave, a manual sync): it holds the move.
	cliRun(t, "migrate", "argocd", "-n", f.ns, "app", "--apply", "--timeout", "2m").expect(t, "an object not created yet", 2, nil,
		[]string{"its inventory does not list 1 objects Application " + f.ns + "/app applied: " + f.ns + "_later__ConfigMap"})
	app := getOld(t, f.ns, applicationsV1A1, "app")
	if _, found, _ := unstructured.NestedMap(app.Object, "spec", "syncPolicy", "automated"); !found {
		t.Fatal("automated sync turned off though the Sync does not list later")
	}
	_ = unstructured.SetNestedSlice(app.Object, app.Object["status"].(map[string]any)["resources"].([]any)[:2], "status", "resources")
	if _, err := dynamic.NewForConfigOrDie(env.Config).Resource(applicationsV1A1).Namespace(f.ns).UpdateStatus(context.Background(), app, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cliRun(t, "migrate", "argocd", "-n", f.ns, "app", "--apply", "--timeout", "2m").expect(t, "adopted", 0, nil,
		[]string{"Sync " + f.ns + "/app applied, Ready and listing every object; Application " + f.ns + "/app automated sync turned off"})
	app = getOld(t, f.ns, applicationsV1A1, "app")
	if auto, found, _ := unstructured.NestedMap(app.Object, "spec", "syncPolicy", "automated"); found {
		t.Errorf("automated sync still on: %v", auto)
	}
	if diff := cmp.Diff([]any{"ServerSideApply=true"}, app.Object["spec"].(map[string]any)["syncPolicy"].(map[string]any)["syncOptions"]); diff != "" {
		t.Errorf("the rest of the sync policy changed (-want +got):\n%s", diff)
	}
	assertAdopted(t, f, uids, "argocd-controller")
}

// TestMigrateFluxLeavesAloneWhatAnAnnotationDisables: an object of the Kustomization's
// inventory that carries kustomize.toolkit.fluxcd.io/reconcile: disabled is left alone by
// the Sync, not listed in its inventory, and does not hold the move; nor does one that is
// not in the cluster (Flux lists, and never creates, an object whose reconcile is disabled).
// The Kustomization is suspended once every other object is listed, and the output names
// both with why. Without it: the Sync never listed them, and the Kustomization was never
// suspended.
func TestMigrateFluxLeavesAloneWhatAnAnnotationDisables(t *testing.T) {
	f := newFixture(t)
	installMigrateCRDs(t)
	installSyncCRD(t)
	left := `apiVersion: v1
kind: ConfigMap
metadata:
  name: left
  namespace: NS
  annotations: {kustomize.toolkit.fluxcd.io/reconcile: disabled}
data: {k: v}
`
	f.publish(map[string]string{"a.yaml": strings.ReplaceAll(cmA, "VERSION", "1"), "b.yaml": cmB, "left.yaml": left})
	uids := applyAsOldTool(t, f, "kustomize-controller")
	applyDocAs(t, f, left, "kustomize-controller")
	createFluxKustomization(t, f, "a", "b", "left", "skipped")
	f.startDaemon(env.Config)

	cliRun(t, "migrate", "flux", "-n", f.ns, "app", "--apply", "--timeout", "2m").expect(t, "adopted but what is left alone", 0, nil,
		[]string{"Sync " + f.ns + "/app applied, Ready and listing every object but " + f.ns + "_left__ConfigMap (left alone: kustomize.toolkit.fluxcd.io/reconcile), " +
			f.ns + "_skipped__ConfigMap (not in the cluster); Kustomization " + f.ns + "/app suspended"})
	if suspended, _, _ := unstructured.NestedBool(getOld(t, f.ns, kustomizationsV1, "app").Object, "spec", "suspend"); !suspended {
		t.Error("the Kustomization was not suspended")
	}
	assertAdopted(t, f, uids, "kustomize-controller")
}
