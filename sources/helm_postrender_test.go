package sources

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestHelmPostRenderers: the kustomize post-renderers of a chart run on its rendered
// objects, in order: a strategic merge patch and a JSON6902 patch selected by kind and
// name, a strategic merge patch deleting an object, an image override; a second
// post-renderer sees the first one's output. Every object still names the chart file it
// came from, and carries no mark of the post-render.
func TestHelmPostRenderers(t *testing.T) {
	src, err := filepath.Abs("testdata/charts")
	if err != nil {
		t.Fatal(err)
	}
	opts := chartOptions(nil, "v1.31.0")
	opts.Helm.PostRenderers = []PostRenderer{{Kustomize: &KustomizePostRenderer{
		Patches: []Patch{
			{Patch: "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: any\n  labels:\n    patched: strategic\nspec:\n  replicas: 5\n",
				Target: &PatchTarget{Kind: "Deployment", Name: "demo-web"}},
			{Patch: "- op: add\n  path: /data/patched\n  value: json6902\n", Target: &PatchTarget{Kind: "ConfigMap", Name: "demo-sub"}},
			{Patch: "$patch: delete\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo-pre-install\n  namespace: apps\n"},
		},
		Images: []Image{{Name: "nginx", NewName: "registry.example.com/nginx", NewTag: "1.28"}},
	}}, {Kustomize: &KustomizePostRenderer{
		Patches: []Patch{{Patch: "- op: replace\n  path: /spec/replicas\n  value: 7\n", Target: &PatchTarget{Kind: "Deployment", LabelSelector: "patched=strategic"}}},
	}}}
	objs, origins, _, err := render(t.Context(), src, "app", opts)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"CustomResourceDefinition /widgets.example.com",
		"ConfigMap apps/demo-sub",
		"Deployment apps/demo-web",
		"Widget apps/demo-widget",
		"ConfigMap apps/demo-post-upgrade",
	}
	if diff := cmp.Diff(want, kindNames(objs)); diff != "" {
		t.Errorf("objects (-want +got):\n%s", diff)
	}
	wantOrigins := []string{"app/crds/widgets.yaml", "app/charts/sub/templates/configmap.yaml",
		"app/templates/deployment.yaml", "app/templates/widget.yaml", "app/templates/hooks.yaml"}
	if diff := cmp.Diff(wantOrigins, origins); diff != "" {
		t.Errorf("origins (-want +got):\n%s", diff)
	}
	dep := find(objs, "Deployment", "demo-web")
	if dep == nil {
		t.Fatal("no Deployment")
	}
	if n, _, _ := unstructured.NestedInt64(dep.Object, "spec", "replicas"); n != 7 {
		t.Errorf("replicas %d, want 7 (5 by the first post-renderer, 7 by the second)", n)
	}
	if dep.GetLabels()["patched"] != "strategic" || dep.GetLabels()["app.kubernetes.io/name"] != "app" {
		t.Errorf("labels %v: want the chart's and patched=strategic", dep.GetLabels())
	}
	containers, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	if len(containers) != 1 || containers[0].(map[string]any)["image"] != "registry.example.com/nginx:1.28" {
		t.Errorf("containers %v: want the image overridden", containers)
	}
	if cm := find(objs, "ConfigMap", "demo-sub"); cm == nil || cm.Object["data"].(map[string]any)["patched"] != "json6902" {
		t.Errorf("demo-sub: %v, want data.patched from the JSON6902 patch", cm)
	}
	for _, o := range objs {
		if _, marked := o.GetAnnotations()[renderIndex]; marked {
			t.Errorf("%s %s keeps %s", o.GetKind(), o.GetName(), renderIndex)
		}
		if _, ok := o.Object["metadata"].(map[string]any)["annotations"]; ok && len(o.GetAnnotations()) == 0 {
			t.Errorf("%s %s: empty annotations added", o.GetKind(), o.GetName())
		}
	}
	if a := find(objs, "ConfigMap", "demo-post-upgrade").GetAnnotations(); a[ForceAnnotation] != ForceEnabled {
		t.Errorf("hook annotations %v: want %s kept", a, ForceAnnotation)
	}
}

// TestHelmPostRendererErrors: a post-renderer that fails is a terminal error naming the
// Sync field at fault (the patch, by its index), not the chart.
func TestHelmPostRendererErrors(t *testing.T) {
	src, err := filepath.Abs("testdata/charts")
	if err != nil {
		t.Fatal(err)
	}
	good := Patch{Patch: "- op: add\n  path: /data/ok\n  value: x\n", Target: &PatchTarget{Kind: "ConfigMap", Name: "demo-sub"}}
	for _, tc := range []struct {
		name string
		prs  []PostRenderer
		want string // a prefix of the error
	}{
		{name: "not YAML", prs: []PostRenderer{{Kustomize: &KustomizePostRenderer{Patches: []Patch{good, {Patch: "a: [\n"}}}}},
			want: "spec.source.helm.postRenderers[0].kustomize.patches[1]: "},
		{name: "JSON6902 on a missing path", prs: []PostRenderer{{Kustomize: &KustomizePostRenderer{}}, {Kustomize: &KustomizePostRenderer{Patches: []Patch{
			{Patch: "- op: replace\n  path: /spec/nothing/here\n  value: 1\n", Target: &PatchTarget{Kind: "ConfigMap", Name: "demo-sub"}}}}}},
			want: "spec.source.helm.postRenderers[1].kustomize.patches[0]: "},
		{name: "JSON6902 without a target", prs: []PostRenderer{{Kustomize: &KustomizePostRenderer{Patches: []Patch{
			good, good, {Patch: "- op: add\n  path: /data/x\n  value: y\n"}}}}},
			want: "spec.source.helm.postRenderers[0].kustomize.patches[2]: "},
		{name: "the sixth of nine", prs: []PostRenderer{{Kustomize: &KustomizePostRenderer{Patches: []Patch{
			good, good, good, good, good, {Patch: "- op: remove\n  path: /data/absent\n", Target: &PatchTarget{Kind: "ConfigMap"}}, good, good, good}}}},
			want: "spec.source.helm.postRenderers[0].kustomize.patches[5]: "},
		{name: "strategic merge patch naming no object", prs: []PostRenderer{{Kustomize: &KustomizePostRenderer{Patches: []Patch{
			{Patch: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: nobody\ndata:\n  a: b\n"}}}}},
			want: "spec.source.helm.postRenderers[0].kustomize.patches[0]: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := chartOptions(nil, "v1.31.0")
			opts.Helm.PostRenderers = tc.prs
			objs, err := Render(t.Context(), src, "app", opts)
			if err == nil {
				t.Fatalf("rendered %v", kindNames(objs))
			}
			if !strings.HasPrefix(err.Error(), tc.want) || !IsTerminal(err) {
				t.Errorf("error:\n%v\nwant a terminal error starting:\n%s", err, tc.want)
			}
		})
	}
}

// TestHelmPostRendererChangesNothingElse: a post-renderer with nothing to do gives the
// chart's objects exactly as rendered without it: kustomize adds, drops and retypes nothing
// (no annotation of its own, no empty map, no number turned into a string).
func TestHelmPostRendererChangesNothingElse(t *testing.T) {
	src, err := filepath.Abs("testdata/charts")
	if err != nil {
		t.Fatal(err)
	}
	plain, plainOrigins, _, err := render(t.Context(), src, "app", chartOptions(map[string]any{"replicas": 2}, "v1.31.0"))
	if err != nil {
		t.Fatal(err)
	}
	opts := chartOptions(map[string]any{"replicas": 2}, "v1.31.0")
	opts.Helm.PostRenderers = []PostRenderer{{Kustomize: &KustomizePostRenderer{}}}
	post, postOrigins, _, err := render(t.Context(), src, "app", opts)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(plain, post); diff != "" {
		t.Errorf("objects (-without +with the post-renderer):\n%s", diff)
	}
	if diff := cmp.Diff(plainOrigins, postOrigins); diff != "" {
		t.Errorf("origins (-without +with the post-renderer):\n%s", diff)
	}
}

// TestHelmPostRenderChunksMatchOneBuild: a post-render in chunks gives the objects one
// kustomize build gives (or fails as it does), whatever the chunk size: patches with and
// without targets, a deletion, images, a rename (which one build also applies to the
// references of other objects: chunking gives way to it), two objects of one id, a patch
// naming no object.
func TestHelmPostRenderChunksMatchOneBuild(t *testing.T) {
	var objs [][]byte
	for i := range 6 {
		objs = append(objs, []byte(fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm-%d","labels":{"n":"%d"}},"data":{"a":"b"}}`, i, i)))
	}
	objs = append(objs, []byte(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web"},"spec":{"selector":{"matchLabels":{"app":"web"}},`+
		`"template":{"metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"name":"web","image":"nginx:1.27","envFrom":[{"configMapRef":{"name":"cm-0"}}]}]}}}}`))
	smp := Patch{Patch: "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {replicas: 4}\n"}
	json6902 := Patch{Patch: "- {op: add, path: /data/c, value: d}", Target: &PatchTarget{Kind: "ConfigMap", LabelSelector: "n in (1,4,5)"}}
	del := Patch{Patch: "$patch: delete\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm-3}\n"}
	rename := Patch{Patch: "- {op: replace, path: /metadata/name, value: renamed}", Target: &PatchTarget{Kind: "ConfigMap", Name: "cm-0"}}
	images := []Image{{Name: "nginx", NewName: "registry.example/nginx", NewTag: "1.28"}}
	for _, tc := range []struct {
		name    string
		objs    [][]byte
		patches []Patch
		chunked bool // the plan chunks (else it gives way to one build at once)
	}{
		{name: "patches, a deletion, images", objs: objs, patches: []Patch{json6902, smp, del}, chunked: true},
		{name: "a rename", objs: objs, patches: []Patch{rename, smp}, chunked: true},
		{name: "two objects of one id", objs: append(objs[:len(objs):len(objs)], objs[2]), patches: []Patch{smp}},
		{name: "a patch naming no object", objs: objs, patches: []Patch{{Patch: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: nobody}\n"}}},
		{name: "a JSON6902 patch without a target", objs: objs, patches: []Patch{{Patch: "- {op: add, path: /data/x, value: y}"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			marked, err := markIndexes(tc.objs)
			if err != nil {
				t.Fatal(err)
			}
			whole, wholeErr := kustomizeResources(marked, tc.patches, images)
			var want []string
			if wholeErr == nil {
				objs, err := finishAll(whole.Resources(), nil)
				if err != nil {
					t.Fatal(err)
				}
				want = builtTexts(objs)
			}
			for _, chunk := range []int{1, 2, 3, 5} {
				if got := planPostRender(marked, tc.patches, chunk) != nil; got != tc.chunked {
					t.Errorf("chunk %d: planned %t, want %t", chunk, got, tc.chunked)
				}
				rs, err := kustomizeBuild(marked, tc.patches, images, chunk)
				if (err == nil) != (wholeErr == nil) {
					t.Fatalf("chunk %d: error %v, one build's %v", chunk, err, wholeErr)
				}
				if diff := cmp.Diff(want, builtTexts(rs)); err == nil && diff != "" {
					t.Errorf("chunk %d (-one build +chunked):\n%s", chunk, diff)
				}
			}
		})
	}
}

func builtTexts(objs []built) []string {
	var out []string
	for _, o := range objs {
		out = append(out, fmt.Sprintf("%d %s", o.index, o.js))
	}
	return out
}
