package migrate

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/e2e/binary"
	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/e2e/gitserver"
	"github.com/converge-dev/converge/e2e/gotool"
)

var env *cluster.Cluster

func TestMain(m *testing.M) { cluster.Main(m, cluster.Full, &env) }

// fluxVersion is the kustomize-controller of Flux 2.7.
const fluxVersion = "v1.9.5"

var (
	kustomizations  = schema.GroupVersionResource{Group: "kustomize.toolkit.fluxcd.io", Version: "v1", Resource: "kustomizations"}
	gitRepositories = schema.GroupVersionResource{Group: "source.toolkit.fluxcd.io", Version: "v1", Resource: "gitrepositories"}
	syncs           = schema.GroupVersionResource{Group: "converge.dev", Version: "v1alpha1", Resource: "syncs"}
)

// workload is what the Kustomization applies: a Deployment whose replicas an HPA owns, its
// Service, a CRD with a custom resource, and ConfigMaps carrying Flux's per-object
// annotations.
var workload = map[string]string{
	"web.yaml": `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: NS}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: registry.example/web:1}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: NS}
spec:
  selector: {app: web}
  ports: [{port: 80}]
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: web, namespace: NS}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 2
  maxReplicas: 3
  metrics: [{type: Resource, resource: {name: cpu, target: {type: Utilization, averageUtilization: 80}}}]
`,
	"widget.yaml": `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.migrate.example.com}
spec:
  group: migrate.example.com
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, properties: {spec: {type: object, x-kubernetes-preserve-unknown-fields: true}}}}
---
apiVersion: migrate.example.com/v1
kind: Widget
metadata: {name: w1, namespace: NS}
spec: {size: 3}
`,
	"config.yaml": `apiVersion: v1
kind: ConfigMap
metadata: {name: plain, namespace: NS}
data: {k: v}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: kept
  namespace: NS
  annotations: {kustomize.toolkit.fluxcd.io/prune: disabled}
data: {k: v}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: argo-kept
  namespace: NS
  annotations: {argocd.argoproj.io/sync-options: "Prune=false,Delete=false"}
data: {k: v}
`,
	"annotated.yaml": `apiVersion: v1
kind: ConfigMap
metadata:
  name: reconcile-off
  namespace: NS
  annotations: {kustomize.toolkit.fluxcd.io/reconcile: disabled}
data: {k: v}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: if-not-present
  namespace: NS
  annotations: {kustomize.toolkit.fluxcd.io/ssa: IfNotPresent}
data: {k: v}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: merged
  namespace: NS
  annotations: {kustomize.toolkit.fluxcd.io/ssa: Merge}
data: {k: v}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: forced
  namespace: NS
  annotations: {kustomize.toolkit.fluxcd.io/force: enabled}
data: {k: v}
`,
}

// TestMigrateFromARunningKustomizeController: a Kustomization applied by the real
// kustomize-controller is moved to a Sync with `converge migrate flux --apply`: every object
// keeps its UID, no ReplicaSet or Pod is replaced, the HPA's replicas stay, kustomize-controller
// owns no field and no Flux tracking label is left, the Sync is Ready without a field conflict, the Kustomization is suspended, and the
// controller, still running, deletes nothing when the Kustomization is then deleted. The Sync
// then prunes what leaves the source, except what Flux's and Argo CD's prune annotations
// keep. Objects with Flux's reconcile, ssa and force annotations keep their UIDs too; those
// the annotation keeps from the hand-over are not handed over.
func TestMigrateFromARunningKustomizeController(t *testing.T) {
	cluster.Require(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	dc := dynamic.NewForConfigOrDie(env.Config)
	controller := startKustomizeController(t, ns)

	git, err := gitserver.Start(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = git.Close() })
	src := t.TempDir()
	for name, doc := range workload {
		if err := os.WriteFile(filepath.Join(src, name), []byte(strings.ReplaceAll(doc, "NS", ns)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sha, err := git.Publish("app", "main", src, "workload")
	if err != nil {
		t.Fatal(err)
	}
	revision := "main@sha1:" + sha
	artifact := serveArtifact(t, src)
	createGitRepository(t, dc, ns, git.RepoURL("app"), revision, artifact)
	apply(t, dc, kustomizations, ns, `apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: app, namespace: NS}
spec:
  sourceRef: {kind: GitRepository, name: repo}
  interval: 10m
  path: ./
  prune: true
  timeout: 2m
`)
	waitFor(t, "the Kustomization Ready at "+revision, 3*time.Minute, func() bool {
		if !controller() {
			t.Fatal("kustomize-controller exited")
		}
		ks, err := dc.Resource(kustomizations).Namespace(ns).Get(ctx, "app", metav1.GetOptions{})
		return err == nil && readyAt(ks, revision)
	})
	waitFor(t, "the HPA scaling web to its 2 minimum replicas and both Pods Ready", 3*time.Minute, func() bool {
		d, err := env.Clientset().AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		return err == nil && d.Spec.Replicas != nil && *d.Spec.Replicas == 2 && d.Status.ReadyReplicas == 2 &&
			d.Status.ObservedGeneration == d.Generation
	})
	before := snapshot(t, dc, ns)

	daemon := binary.Start(t, "run", "--kubeconfig", env.Kubeconfig, "--watch-namespace", ns,
		"--metrics-addr", "0", "--health-addr", "0", "--leader-elect=false",
		"--git-cache-dir", t.TempDir(), "--allow-local-git")
	waitFor(t, "the Sync kind served", time.Minute, func() bool {
		_, err := dc.Resource(syncs).Namespace(ns).List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil
	})
	out, code := converge(t, "migrate", "flux", "-n", ns, "app", "--apply", "--timeout", "3m", "--kubeconfig", env.Kubeconfig)
	if code != 0 || !strings.Contains(out, "Kustomization "+ns+"/app suspended") {
		t.Fatalf("converge migrate flux --apply: exit %d, want 0 and the Kustomization suspended:\n%s\ndaemon:\n%s", code, out, daemon.Log())
	}
	after := snapshot(t, dc, ns)
	after.compare(t, before)
	handedOver(t, dc, ns)
	s, err := dc.Resource(syncs).Namespace(ns).Get(ctx, "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !readyAt(s, revision) {
		t.Errorf("the Sync is not Ready at %s: %v", revision, s.Object["status"])
	}

	// The user's last step: delete the suspended Kustomization. Its controller, still
	// running, removes its finalizer and deletes nothing.
	if err := dc.Resource(kustomizations).Namespace(ns).Delete(ctx, "app", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the Kustomization gone", 2*time.Minute, func() bool {
		_, err := dc.Resource(kustomizations).Namespace(ns).Get(ctx, "app", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	snapshot(t, dc, ns).compare(t, before)
	handedOver(t, dc, ns) // the controller took back no field while it handled the deletion

	// The Sync prunes from now on, honouring Flux's prune annotation: with config.yaml gone
	// from the source, plain is deleted and kept stays.
	if err := os.Remove(filepath.Join(src, "config.yaml")); err != nil {
		t.Fatal(err)
	}
	sha, err = git.Publish("app", "main", src, "config.yaml removed")
	if err != nil {
		t.Fatal(err)
	}
	if out, code := converge(t, "reconcile", "-n", ns, "app", "--timeout", "2m", "--kubeconfig", env.Kubeconfig); code != 0 {
		t.Fatalf("converge reconcile: exit %d\n%s", code, out)
	}
	waitFor(t, "the Sync Ready at the next commit", 2*time.Minute, func() bool {
		s, err := dc.Resource(syncs).Namespace(ns).Get(ctx, "app", metav1.GetOptions{})
		return err == nil && readyAt(s, "main@sha1:"+sha)
	})
	cms := env.Clientset().CoreV1().ConfigMaps(ns)
	if _, err := cms.Get(ctx, "plain", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ConfigMap plain left the source but was not pruned: %v", err)
	}
	if _, err := cms.Get(ctx, "kept", metav1.GetOptions{}); err != nil {
		t.Errorf("ConfigMap kept (kustomize.toolkit.fluxcd.io/prune: disabled): %v", err)
	}
	if _, err := cms.Get(ctx, "argo-kept", metav1.GetOptions{}); err != nil {
		t.Errorf("ConfigMap argo-kept (argocd.argoproj.io/sync-options: Prune=false): %v", err)
	}
}

// handedOver fails t unless every object of the workload is free of kustomize-controller:
// no managedFields entry of its manager (its fields are Converge's now) and none of Flux's
// tracking labels.
func handedOver(t *testing.T, dc dynamic.Interface, ns string) {
	t.Helper()
	for _, o := range objects {
		if o.notHandedOver {
			continue
		}
		ri := dc.Resource(o.gvr).Namespace(ns)
		if o.namespace == "" {
			ri = dc.Resource(o.gvr).Namespace("")
		}
		u, err := ri.Get(t.Context(), o.name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("%s/%s: %v", o.gvr.Resource, o.name, err)
			continue
		}
		for _, m := range u.GetManagedFields() {
			if m.Manager == "kustomize-controller" {
				t.Errorf("%s/%s: kustomize-controller still owns fields (%s)", o.gvr.Resource, o.name, m.Operation)
			}
		}
		for k := range u.GetLabels() {
			if strings.HasPrefix(k, "kustomize.toolkit.fluxcd.io/") {
				t.Errorf("%s/%s: Flux's tracking label %s left", o.gvr.Resource, o.name, k)
			}
		}
	}
}

// object names one object of the workload.
type object struct {
	gvr       schema.GroupVersionResource
	namespace string
	name      string
	// notHandedOver: an annotation keeps the object's fields with the managers that have
	// them (kustomize-controller's among them).
	notHandedOver bool
}

var objects = []object{
	{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, "NS", "web", false},
	{schema.GroupVersionResource{Version: "v1", Resource: "services"}, "NS", "web", false},
	{schema.GroupVersionResource{Group: "autoscaling", Version: "v2", Resource: "horizontalpodautoscalers"}, "NS", "web", false},
	{schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}, "", "widgets.migrate.example.com", false},
	{schema.GroupVersionResource{Group: "migrate.example.com", Version: "v1", Resource: "widgets"}, "NS", "w1", false},
	{schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "NS", "plain", false},
	{schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "NS", "kept", false},
	{schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "NS", "argo-kept", false},
	{schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "NS", "forced", false},
	// Not handed over, as their annotations say: left alone, created only when missing, or
	// applied beside the fields of their other managers.
	{schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "NS", "reconcile-off", true},
	{schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "NS", "if-not-present", true},
	{schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "NS", "merged", true},
}

// state is what must not change across the move: each object's UID, the Deployment's
// generation and replicas, and its Pods.
type state struct {
	uids       map[string]string
	generation int64
	replicas   int32
	pods       []string
	sets       []string
	deployment string // as YAML, to show what changed
}

func snapshot(t *testing.T, dc dynamic.Interface, ns string) state {
	t.Helper()
	ctx := t.Context()
	s := state{uids: map[string]string{}}
	for _, o := range objects {
		key := o.gvr.Resource + "/" + o.name
		var u *unstructured.Unstructured
		var err error
		if o.namespace == "" {
			u, err = dc.Resource(o.gvr).Get(ctx, o.name, metav1.GetOptions{})
		} else {
			u, err = dc.Resource(o.gvr).Namespace(ns).Get(ctx, o.name, metav1.GetOptions{})
		}
		if err != nil {
			s.uids[key] = "missing: " + err.Error()
			continue
		}
		s.uids[key] = string(u.GetUID())
	}
	d, err := env.Clientset().AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.generation, s.replicas = d.Generation, ptrValue(d.Spec.Replicas)
	d.Status = appsv1.DeploymentStatus{}
	if b, err := yaml.Marshal(d); err == nil {
		s.deployment = string(b)
	}
	pods, err := env.Clientset().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			s.pods = append(s.pods, p.Name+"/"+string(p.UID))
		}
	}
	slices.Sort(s.pods)
	sets, err := env.Clientset().AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	for _, rs := range sets.Items {
		s.sets = append(s.sets, rs.Name+"/"+string(rs.UID))
	}
	slices.Sort(s.sets)
	return s
}

func (s state) compare(t *testing.T, before state) {
	t.Helper()
	for key, uid := range before.uids {
		if s.uids[key] != uid {
			t.Errorf("%s: UID %s, was %s (recreated or deleted)", key, s.uids[key], uid)
		}
	}
	// The API server bumps a Deployment's generation when its annotations change (they are
	// copied to its ReplicaSets), so the owner annotation Converge adds costs one; its
	// template, ReplicaSets and Pods stay.
	if s.generation > before.generation+1 {
		t.Errorf("Deployment web: generation %d, was %d (more than the owner annotation's one); now:\n%s\nwas:\n%s", s.generation, before.generation, s.deployment, before.deployment)
	}
	if s.replicas != before.replicas {
		t.Errorf("Deployment web: %d replicas, was %d (the HPA's)", s.replicas, before.replicas)
	}
	if !slices.Equal(s.sets, before.sets) {
		t.Errorf("ReplicaSets of web: %v, were %v (a rollout)", s.sets, before.sets)
	}
	if !slices.Equal(s.pods, before.pods) {
		t.Errorf("Pods of web: %v, were %v", s.pods, before.pods)
	}
}

func ptrValue(p *int32) int32 {
	if p == nil {
		return -1
	}
	return *p
}

// readyAt says u (a Kustomization or a Sync) is Ready at revision for its generation.
func readyAt(u *unstructured.Unstructured, revision string) bool {
	applied, _, _ := unstructured.NestedString(u.Object, "status", "lastAppliedRevision")
	observed, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Ready" && m["status"] == "True" {
			return applied == revision && observed == u.GetGeneration()
		}
	}
	return false
}

// startKustomizeController installs Flux's CRDs (the Kustomization's from the controller's
// module, the sources' as schemas that keep any field) and runs the controller, built from
// the module proxy, watching ns only, until the test ends.
func startKustomizeController(t *testing.T, ns string) (running func() bool) {
	t.Helper()
	bin, src := gotool.ModuleBinary(t, "kustomize-controller", "github.com/fluxcd/kustomize-controller", fluxVersion, ".")
	crd, err := os.ReadFile(filepath.Join(src, "config", "crd", "bases", "kustomize.toolkit.fluxcd.io_kustomizations.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dc := dynamic.NewForConfigOrDie(env.Config)
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	apply(t, dc, crds, "", string(crd))
	for _, kind := range []string{"GitRepository", "OCIRepository", "Bucket"} {
		apply(t, dc, crds, "", sourceCRD(kind))
	}
	ctx := t.Context()
	for _, gvr := range []schema.GroupVersionResource{kustomizations, gitRepositories,
		{Group: "source.toolkit.fluxcd.io", Version: "v1", Resource: "ocirepositories"},
		{Group: "source.toolkit.fluxcd.io", Version: "v1", Resource: "buckets"}} {
		waitFor(t, gvr.Resource+" served", time.Minute, func() bool {
			_, err := dc.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{Limit: 1})
			return err == nil
		})
	}
	log, err := os.Create(filepath.Join(t.TempDir(), "kustomize-controller.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--watch-all-namespaces=false",
		"--metrics-addr=0", "--health-addr=0", "--no-remote-bases=true", "--log-level=debug")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig, "RUNTIME_NAMESPACE="+ns)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		_ = log.Close()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("kustomize-controller:\n%s", tail(b, 8000))
		}
	})
	return func() bool {
		select {
		case <-exited:
			return false
		default:
			return true
		}
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// sourceCRD is a Flux source kind whose spec and status keep any field: the test writes the
// GitRepository's status.artifact as source-controller would.
func sourceCRD(kind string) string {
	plural := strings.ToLower(kind) + "s"
	if strings.HasSuffix(plural, "ys") {
		plural = strings.TrimSuffix(plural, "ys") + "ies"
	}
	return fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: %[2]s.source.toolkit.fluxcd.io}
spec:
  group: source.toolkit.fluxcd.io
  names: {kind: %[1]s, plural: %[2]s}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
          status: {type: object, x-kubernetes-preserve-unknown-fields: true}
`, kind, plural)
}

// artifact is a tarball served as source-controller serves it.
type artifact struct{ url, digest string }

// serveArtifact serves dir's files as a gzipped tarball until the test ends.
func serveArtifact(t *testing.T, dir string) artifact {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	if err := tw.AddFS(os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	body := buf.Bytes()
	sum := sha256.Sum256(body)
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return artifact{url: srv.URL + "/artifact.tar.gz", digest: "sha256:" + hex.EncodeToString(sum[:])}
}

// createGitRepository creates the GitRepository of url and writes the status source-controller
// would: the artifact of revision.
func createGitRepository(t *testing.T, dc dynamic.Interface, ns, url, revision string, a artifact) {
	t.Helper()
	apply(t, dc, gitRepositories, ns, `apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: repo, namespace: NS}
spec: {url: "`+url+`", interval: 1m, ref: {branch: main}}
`)
	r := dc.Resource(gitRepositories).Namespace(ns)
	u, err := r.Get(t.Context(), "repo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Format(time.RFC3339)
	u.Object["status"] = map[string]any{
		"observedGeneration": u.GetGeneration(),
		"artifact": map[string]any{"path": "gitrepository/" + ns + "/repo/artifact.tar.gz", "url": a.url,
			"revision": revision, "digest": a.digest, "lastUpdateTime": now},
		"conditions": []any{map[string]any{"type": "Ready", "status": "True", "reason": "Succeeded",
			"message": "stored artifact for revision '" + revision + "'", "lastTransitionTime": now, "observedGeneration": u.GetGeneration()}},
	}
	if _, err := r.UpdateStatus(t.Context(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// apply creates or updates the objects of docs (NS replaced by ns) with server-side apply.
func apply(t *testing.T, dc dynamic.Interface, gvr schema.GroupVersionResource, ns, docs string) {
	t.Helper()
	for _, doc := range strings.Split(strings.ReplaceAll(docs, "NS", ns), "\n---\n") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatal(err)
		}
		if len(u.Object) == 0 {
			continue
		}
		b, err := u.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var ri dynamic.ResourceInterface = dc.Resource(gvr)
		if u.GetNamespace() != "" {
			ri = dc.Resource(gvr).Namespace(u.GetNamespace())
		}
		force := true
		if _, err := ri.Patch(t.Context(), u.GetName(), "application/apply-patch+yaml", b,
			metav1.PatchOptions{FieldManager: "migrate-test", Force: &force}); err != nil {
			t.Fatalf("apply %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
}

// converge runs the converge binary and returns its combined output and exit code.
func converge(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(binary.Converge(t), args...)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

// waitFor polls cond until it holds, failing t after within.
func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, within, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("%s: not within %s", what, within)
	}
}
