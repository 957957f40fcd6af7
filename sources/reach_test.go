package sources

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// TestKustomizeIgnoresWhatItDoesNotReach: a 50 MB file that no kustomization references,
// beside a small kustomization, is neither read nor refused: the build succeeds, in-process
// and isolated (it failed with "file too large" when a build copied the whole source).
func TestKustomizeIgnoresWhatItDoesNotReach(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"app/kustomization.yaml": "resources: [cm.yaml]\n",
		"app/cm.yaml":            cm("a", "x"),
	})
	big := filepath.Join(dir, "assets", "video.yaml")
	if err := os.MkdirAll(filepath.Dir(big), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(big, make([]byte, 50<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, isolate := range []bool{false, true} {
		opts := DefaultRenderOptions()
		opts.Isolate = isolate
		objs, err := Render(t.Context(), dir, "app", opts)
		if err != nil || len(objs) != 1 {
			t.Errorf("isolate=%t: %d objects, error %v; want the one object", isolate, len(objs), err)
		}
	}
}

// TestKustomizeCountsOnlyWhatItReaches: the byte budget of a render counts the files its
// kustomizations reach, not the rest of the source. Ten unreferenced files of 16 KiB beside
// two apps of a few hundred bytes: a budget of 64 KiB holds the render (it failed with
// "source too large" when each build copied the whole source), and a budget below what the
// apps themselves hold still fails.
func TestKustomizeCountsOnlyWhatItReaches(t *testing.T) {
	files := map[string]string{
		"apps/one/kustomization.yaml": "resources: [cm.yaml, ../../base]\n",
		"apps/one/cm.yaml":            cm("one", "x"),
		"apps/two/kustomization.yaml": "resources: [cm.yaml]\n",
		"apps/two/cm.yaml":            cm("two", "x"),
		"base/kustomization.yaml":     "resources: [cm.yaml]\n",
		"base/cm.yaml":                cm("base", "x"),
	}
	reached := 0
	for _, content := range files {
		reached += len(content)
	}
	for i := range 10 {
		files["docs/page"+string(rune('a'+i))+".yaml"] = cm("unused", "x") + "  pad: " + strings.Repeat("x", 16<<10) + "\n"
	}
	dir := writeTree(t, files)
	for _, isolate := range []bool{false, true} {
		opts := DefaultRenderOptions()
		opts.Isolate = isolate
		opts.Limits.MaxTotalSize = 64 << 10 // the answers of render children count too
		objs, err := Render(t.Context(), dir, "apps", opts)
		if err != nil || len(objs) != 3 {
			t.Errorf("isolate=%t, budget %d: %d objects, error %v; want the 3 objects", isolate, opts.Limits.MaxTotalSize, len(objs), err)
		}
		opts.Limits.MaxTotalSize = int64(reached) - 1
		if _, err := Render(t.Context(), dir, "apps", opts); !errors.Is(err, ErrSourceTooLarge) {
			t.Errorf("isolate=%t, budget %d below the %d bytes reached: error %v, want ErrSourceTooLarge", isolate, opts.Limits.MaxTotalSize, reached, err)
		}
	}
}

// reachTree is an overlay that uses every field by which kustomize loads a file or folder,
// beside files it does not reference.
var reachTree = map[string]string{
	"overlay/kustomization.yaml": `resources: [cm.yaml, ../base]
components: [../component]
crds: [crd.json]
configurations: [config.yaml]
patchesStrategicMerge:
- psm.yaml
- |
  apiVersion: v1
  kind: ConfigMap
  metadata: {name: base, namespace: x}
  data: {inline: "yes"}
patches:
- path: patch.yaml
  target: {kind: ConfigMap, name: overlay}
patchesJson6902:
- path: json6902.yaml
  target: {version: v1, kind: ConfigMap, name: overlay}
replacements:
- path: replacement.yaml
configMapGenerator:
- name: gen
  files: [gen.txt, key=keyed.txt]
  envs: [gen.env]
- name: legacy
  env: legacy.env
secretGenerator:
- name: secret
  files: [secret.txt]
generators: [generator.yaml]
transformers: [transformer.yaml, ../transformers]
`,
	"overlay/cm.yaml":          cm("overlay", "x"),
	"overlay/crd.json":         "{\"example.com/v1.Widget\": {\"Schema\": {\"properties\": {\"spec\": {\"type\": \"object\"}}}}}\n",
	"overlay/config.yaml":      "commonLabels:\n- path: spec/selector\n  create: true\n  kind: Widget\n",
	"overlay/psm.yaml":         "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: base, namespace: x}\ndata: {psm: \"yes\"}\n",
	"overlay/patch.yaml":       "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: overlay}\ndata: {patched: \"yes\"}\n",
	"overlay/json6902.yaml":    "- op: add\n  path: /data/json\n  value: \"yes\"\n",
	"overlay/replacement.yaml": "source: {kind: ConfigMap, name: base, fieldPath: data.psm}\ntargets:\n- select: {kind: ConfigMap, name: overlay}\n  fieldPaths: [data.replaced]\n  options: {create: true}\n",
	"overlay/gen.txt":          "generated\n",
	"overlay/keyed.txt":        "keyed\n",
	"overlay/gen.env":          "A=1\n",
	"overlay/legacy.env":       "B=2\n",
	"overlay/secret.txt":       "s3cret\n",
	"overlay/generator.yaml":   "apiVersion: builtin\nkind: ConfigMapGenerator\nmetadata: {name: plugin-gen}\nfiles: [plugin.txt]\n",
	"overlay/plugin.txt":       "from a generator config\n",
	"overlay/transformer.yaml": "apiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: t}\npath: transform.yaml\ntarget: {kind: ConfigMap, name: overlay}\n",
	"overlay/transform.yaml":   "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: overlay}\ndata: {transformed: \"yes\"}\n",
	// A folder of transformer configs: their paths are the listing overlay's.
	"transformers/kustomization.yaml": "resources: [t.yaml]\n",
	"transformers/t.yaml":             "apiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: t2}\npath: transform2.yaml\ntarget: {kind: ConfigMap, name: base}\n",
	"overlay/transform2.yaml":         "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: base}\ndata: {transformed2: \"yes\"}\n",
	"base/widget.yaml":                "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n",
	"base/kustomization.yaml":         "resources: [cm.yaml, widget.yaml]\n",
	"base/cm.yaml":                    cm("base", "x"),
	"component/kustomization.yaml":    "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\nlabels:\n- pairs: {component: \"yes\"}\n",
	"unused/kustomization.yaml":       "resources: [cm.yaml]\n",
	"unused/cm.yaml":                  cm("unused", "x"),
}

// TestKustomizeReachesEveryLoadingField: an overlay that loads files through every field
// kustomize reads builds from what it reaches exactly as kustomize builds it on the disk,
// and the copy holds nothing it does not reach.
func TestKustomizeReachesEveryLoadingField(t *testing.T) {
	dir := writeTree(t, reachTree)
	ko := krusty.MakeDefaultOptions()
	ko.LoadRestrictions = types.LoadRestrictionsRootOnly
	m, err := krusty.MakeKustomizer(ko).Run(filesys.MakeFsOnDisk(), filepath.Join(dir, "overlay"))
	if err != nil {
		t.Fatalf("kustomize on the disk: %v", err)
	}
	var want []string
	for _, r := range m.Resources() {
		js, err := r.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, string(js))
	}
	for _, isolate := range []bool{false, true} {
		opts := DefaultRenderOptions()
		opts.Isolate = isolate
		objs, err := Render(t.Context(), dir, "overlay", opts)
		if err != nil {
			t.Fatalf("isolate=%t: %v", isolate, err)
		}
		var got []string
		for _, o := range objs {
			js, err := json.Marshal(o.Object)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, string(js))
		}
		if diff := cmp.Diff(canonical(t, want), canonical(t, got)); diff != "" {
			t.Errorf("isolate=%t: render differs from kustomize on the disk (-want +got):\n%s", isolate, diff)
		}
	}

	mem, err := reach(t.Context(), dir, "overlay", "overlay/kustomization.yaml", newBudget("overlay", Limits{}), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var copied []string
	if err := mem.Walk("/", func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			copied = append(copied, strings.TrimPrefix(p, "/"))
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var reached []string
	for name := range reachTree {
		if !strings.HasPrefix(name, "unused/") {
			reached = append(reached, name)
		}
	}
	slices.Sort(reached)
	slices.Sort(copied)
	if diff := cmp.Diff(reached, copied); diff != "" {
		t.Errorf("files copied for the build (-reached +copied):\n%s", diff)
	}
}

// canonical re-marshals JSON objects so that key order does not matter, in sorted order.
func canonical(t *testing.T, objs []string) []string {
	t.Helper()
	out := make([]string, 0, len(objs))
	for _, s := range objs {
		var v any
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(b))
	}
	slices.Sort(out)
	return out
}
