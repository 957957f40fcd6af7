package sources

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// corpusObject returns the i-th object of a generated corpus: a mix of kinds that exercise
// every transformer a chunked build supports (labels and selectors, annotations, images,
// namespaces of namespaced and cluster-scoped kinds, Lists, local-config objects, custom
// resources) and the name references kustomize checks (a Deployment naming a ConfigMap, a
// Secret and a ServiceAccount; a Service selecting it).
func corpusObject(i int) string {
	name := fmt.Sprintf("o%04d", i)
	switch i % 10 {
	case 0:
		return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s, labels: {app: %s}}\ndata: {k: v%d}\n", name, name, i)
	case 1:
		return fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata: {name: %s, namespace: keep}\nstringData: {p: s%d}\n", name, i)
	case 2:
		return fmt.Sprintf("apiVersion: v1\nkind: Service\nmetadata: {name: %s}\nspec:\n  selector: {app: %s}\n  ports: [{port: 80}]\n", name, name)
	case 3:
		return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: %[1]s, annotations: {note: "x"}}
spec:
  selector: {matchLabels: {app: %[1]s}}
  template:
    metadata: {labels: {app: %[1]s}}
    spec:
      serviceAccountName: o%04[2]d
      volumes:
      - {name: c, configMap: {name: o%04[3]d}}
      - {name: s, secret: {secretName: o%04[4]d}}
      containers:
      - {name: app, image: "nginx:1.25"}
      - {name: side, image: "registry.example/tools/side@sha256:%064[5]d"}
      initContainers:
      - {name: init, image: busybox}
`, name, i+3, i-3, i-2, i)
	case 4:
		return fmt.Sprintf("apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: %s}\nrules: [{apiGroups: [\"\"], resources: [configmaps], verbs: [get], resourceNames: [o%04d]}]\n", name, i-4)
	case 5:
		return fmt.Sprintf("apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: %s-a}}\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: %s-b}}\n", name, name)
	case 6:
		return fmt.Sprintf("apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: %s}\n", name)
	case 7:
		return fmt.Sprintf("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: %s}\nspec: {image: nginx, size: %d}\n", name, i)
	case 8:
		return fmt.Sprintf("apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: %s}\nvalue: %d\n", name, i)
	default:
		return fmt.Sprintf("apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: %s}\nspec:\n  schedule: \"* * * * *\"\n  jobTemplate:\n    spec:\n      template:\n        spec:\n          containers: [{name: c, image: nginx}]\n          restartPolicy: Never\n", name)
	}
}

// corpus writes n objects, perFile to a file, into dir with the kustomization head (its
// fields but resources) and returns dir.
func corpus(t *testing.T, n, perFile int, head string, extra func(i int) string) string {
	t.Helper()
	dir := t.TempDir()
	var files []string
	for start := 0; start < n; start += perFile {
		var docs []string
		for i := start; i < min(start+perFile, n); i++ {
			doc := corpusObject(i)
			if extra != nil {
				if e := extra(i); e != "" {
					doc = e
				}
			}
			docs = append(docs, doc)
		}
		name := fmt.Sprintf("f%03d.yaml", start/perFile)
		if start/perFile%3 == 1 {
			name = fmt.Sprintf("sub/f%03d.yaml", start/perFile) // a file below the folder
		}
		write(t, filepath.Join(dir, name), strings.Join(docs, "---\n"))
		files = append(files, name)
	}
	write(t, filepath.Join(dir, "kustomization.yaml"), head+"resources:\n- "+strings.Join(files, "\n- ")+"\n")
	return dir
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// buildBoth builds the kustomization in root/rel whole with krusty and through run with
// chunks of chunkSize objects; it reports whether run built in chunks.
func buildBoth(t *testing.T, root, rel string, chunkSize int) (whole, got []string, wholeErr, gotErr error, chunked bool) {
	t.Helper()
	u := unit{rel: rel, kustomization: "kustomization.yaml"}
	in := func() *buildInput {
		in, err := prepare(context.Background(), root, u, DefaultRenderOptions(), newBudget(rel, Limits{}))
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	strs := func(bs [][]byte) []string {
		out := make([]string, len(bs))
		for i, b := range bs {
			out[i] = string(b)
		}
		return out
	}
	w := in()
	w.chunkObjects = 0
	wb, _, wholeErr := w.run(context.Background())
	c := in()
	c.chunkObjects = chunkSize
	if plan := c.plan(); plan != nil {
		_, chunked, _ = c.runChunked(plan)
		// runChunked restored the kustomization: run builds from it again.
	}
	gb, _, gotErr := c.run(context.Background())
	return strs(wb), strs(gb), wholeErr, gotErr, chunked
}

// TestChunkedBuildMatchesKrusty is the differential test of the chunked build: for every
// kustomization of the corpus the output of run (chunked when it may) is byte for byte the
// output of one whole krusty build, errors included; the cases a chunked build does not
// support must fall back, and the supported ones must really be chunked.
func TestChunkedBuildMatchesKrusty(t *testing.T) {
	const n = 60
	unsafe := func(kind string) func(i int) string {
		return func(i int) string {
			switch {
			case i == 5 && kind == "RoleBinding":
				return "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: rb}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: o0004}\nsubjects: [{kind: ServiceAccount, name: sa-far}]\n"
			case i == 5 && kind == "Webhook":
				return "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata: {name: wh}\nwebhooks:\n- name: w.example.com\n  admissionReviewVersions: [v1]\n  sideEffects: None\n  clientConfig: {service: {name: svc-far}}\n"
			case i == n-4 && kind == "RoleBinding":
				return "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: sa-far}\n"
			case i == n-4 && kind == "Webhook":
				return "apiVersion: v1\nkind: Service\nmetadata: {name: svc-far}\nspec: {ports: [{port: 443}]}\n"
			}
			return ""
		}
	}
	// pair puts first near the start and second near the end: in different chunks.
	pair := func(first, second string) func(i int) string {
		return func(i int) string {
			switch i {
			case 2:
				return first
			case n - 2:
				return second
			}
			return ""
		}
	}
	volumeOf := func(configMap string) string {
		return "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: dep}\nspec:\n  selector: {matchLabels: {a: b}}\n  template:\n    metadata: {labels: {a: b}}\n    spec:\n      containers: [{name: c, image: nginx}]\n      volumes: [{name: v, configMap: {name: " + configMap + "}}]\n"
	}
	duplicate := func(i int) string {
		if i == n-1 {
			return corpusObject(0) // the same ConfigMap as the first file's
		}
		return ""
	}
	broken := func(i int) string {
		if i == n/2 {
			return "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: [broken\n"
		}
		return ""
	}
	for _, tc := range []struct {
		name    string
		head    string
		extra   func(i int) string
		chunked bool
	}{
		{"no transformer", "", nil, true},
		{"namespace", "namespace: team\n", nil, true},
		{"labels", "labels:\n- pairs: {team: a}\n  includeSelectors: true\n  includeTemplates: true\n- pairs: {tier: web}\n", nil, true},
		{"commonLabels", "commonLabels: {team: a, env: prod}\n", nil, true},
		{"commonAnnotations", "commonAnnotations: {owner: platform, note: \"multi\\nline\"}\n", nil, true},
		{"images", "images:\n- {name: nginx, newName: mirror.example/nginx, newTag: \"1.27\"}\n- {name: busybox, digest: \"sha256:" + strings.Repeat("ab", 32) + "\"}\n- {name: registry.example/tools/side, newName: other.example/side}\n", nil, true},
		{"all together", "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: team\ncommonLabels: {team: a}\ncommonAnnotations: {owner: platform}\nlabels:\n- pairs: {tier: web}\nimages:\n- {name: nginx, newTag: \"2\"}\n", nil, true},
		// Fall back: a transformer that renames, generates or patches across objects.
		{"namePrefix", "namePrefix: p-\n", nil, false},
		{"nameSuffix", "nameSuffix: -s\n", nil, false},
		{"generator", "configMapGenerator:\n- {name: generated, literals: [a=b]}\n", nil, false},
		{"patches", "patches:\n- {target: {kind: Deployment}, patch: '[{\"op\": \"add\", \"path\": \"/metadata/labels\", \"value\": {p: \"1\"}}]'}\n", nil, false},
		{"replicas", "replicas:\n- {name: o0003, count: 5}\n", nil, false},
		{"sortOptions", "sortOptions: {order: legacy}\n", nil, false},
		{"component kind", "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n", nil, false},
		// Fall back: objects that read another object's namespace, far apart.
		{"RoleBinding subject in another chunk", "", unsafe("RoleBinding"), false},
		{"RoleBinding subject in another chunk, namespace", "namespace: team\n", unsafe("RoleBinding"), false},
		{"webhook service in another chunk, namespace", "namespace: team\n", unsafe("Webhook"), false},
		// Fall back: what the whole build refuses.
		{"duplicate across chunks", "", duplicate, false},
		{"broken file", "", broken, false},
		// Fall back: a file that takes part in the build beyond its own object (each of these
		// gave another output, or none, when built in chunks).
		{"local-config object named as another", "", pair(
			"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: dup, annotations: {config.kubernetes.io/local-config: \"true\"}}\n",
			"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: dup}\ndata: {a: b}\n"), false},
		{"needsHashSuffix", "", pair(
			"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: hashed, annotations: {internal.config.kubernetes.io/needsHashSuffix: enabled}}\ndata: {a: b}\n",
			volumeOf("hashed")), false},
		{"previousNames", "", pair(
			"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: newname, annotations: {internal.config.kubernetes.io/previousNames: oldname, internal.config.kubernetes.io/previousKinds: ConfigMap, internal.config.kubernetes.io/previousNamespaces: default}}\ndata: {a: b}\n",
			volumeOf("oldname")), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := corpus(t, n, 4, tc.head, tc.extra)
			whole, got, wholeErr, gotErr, chunked := buildBoth(t, dir, ".", 8)
			if chunked != tc.chunked {
				t.Errorf("built in chunks: %v, want %v", chunked, tc.chunked)
			}
			if fmt.Sprint(wholeErr) != fmt.Sprint(gotErr) {
				t.Fatalf("errors differ:\nwhole:   %v\nchunked: %v", wholeErr, gotErr)
			}
			if diff := cmp.Diff(whole, got); diff != "" {
				t.Errorf("output differs from krusty's (-whole +chunked):\n%s", diff)
			}
			if wholeErr == nil && len(whole) < n/2 {
				t.Fatalf("only %d objects built", len(whole))
			}
		})
	}
}

// TestChunkedBuildNeedsTheFallbacks shows that the unsafe kinds are needed: built in chunks
// regardless, a RoleBinding whose ServiceAccount, or a webhook whose Service, sits in another
// chunk loses the namespace kustomize writes into its reference. If kustomize stops doing
// that, this test says the rule may go.
func TestChunkedBuildNeedsTheFallbacks(t *testing.T) {
	const n = 60
	referrers := map[string]string{
		"RoleBinding":                    "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: rb}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: o0004}\nsubjects: [{kind: ServiceAccount, name: far}]\n",
		"ValidatingWebhookConfiguration": "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata: {name: wh}\nwebhooks:\n- name: w.example.com\n  admissionReviewVersions: [v1]\n  sideEffects: None\n  clientConfig: {service: {name: far}}\n",
	}
	targets := map[string]string{
		"RoleBinding":                    "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: far}\n",
		"ValidatingWebhookConfiguration": "apiVersion: v1\nkind: Service\nmetadata: {name: far}\nspec: {ports: [{port: 443}]}\n",
	}
	saved := chunkUnsafeKinds
	defer func() { chunkUnsafeKinds = saved }()
	for kind, referrer := range referrers {
		chunkUnsafeKinds = map[string]bool{}
		dir := corpus(t, n, 4, "namespace: team\n", func(i int) string {
			switch i {
			case 5:
				return referrer
			case n - 4:
				return targets[kind]
			}
			return ""
		})
		whole, got, _, _, chunked := buildBoth(t, dir, ".", 8)
		if !chunked || cmp.Equal(whole, got) {
			t.Errorf("%s: without the unsafe kinds, chunked %v and outputs equal %v: the rule may be unneeded", kind, chunked, cmp.Equal(whole, got))
		}
	}
}

// TestChunkedBuildExamples builds the repository's kustomizations both ways.
func TestChunkedBuildExamples(t *testing.T) {
	root, err := filepath.Abs("../examples")
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"demo/base", "demo/overlays/local"} {
		whole, got, wholeErr, gotErr, _ := buildBoth(t, root, rel, 1)
		if fmt.Sprint(wholeErr) != fmt.Sprint(gotErr) {
			t.Fatalf("%s: errors differ:\nwhole:   %v\nchunked: %v", rel, wholeErr, gotErr)
		}
		if diff := cmp.Diff(whole, got); diff != "" {
			t.Errorf("%s: output differs (-whole +chunked):\n%s", rel, diff)
		}
	}
}

// TestChunkedBuildOverlays builds trees of overlays and bases both ways: an overlay over a
// base, three levels with files at each, two bases side by side; and falls back for a base
// listed twice, a base with a transformer that is not supported, and a base folder without
// kustomization.
func TestChunkedBuildOverlays(t *testing.T) {
	files := func(t *testing.T, dir string, from, n int) []string {
		var names []string
		for f := 0; f < n; f++ {
			var docs []string
			for i := from + f*4; i < from+f*4+4; i++ {
				docs = append(docs, corpusObject(i))
			}
			name := fmt.Sprintf("f%03d.yaml", f)
			write(t, filepath.Join(dir, name), strings.Join(docs, "---\n"))
			names = append(names, name)
		}
		return names
	}
	kust := func(t *testing.T, dir, head string, resources ...string) {
		write(t, filepath.Join(dir, "kustomization.yaml"), head+"resources:\n- "+strings.Join(resources, "\n- ")+"\n")
	}
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, root string) string // returns the folder built
		chunked bool
	}{
		{"overlay over a base", func(t *testing.T, root string) string {
			kust(t, filepath.Join(root, "base"), "labels:\n- pairs: {layer: base}\n", files(t, filepath.Join(root, "base"), 0, 10)...)
			kust(t, filepath.Join(root, "overlays/prod"), "namespace: prod\nimages:\n- {name: nginx, newTag: \"9\"}\ncommonAnnotations: {env: prod}\n", "../../base")
			return "overlays/prod"
		}, true},
		{"three levels, files at each", func(t *testing.T, root string) string {
			kust(t, filepath.Join(root, "base"), "", files(t, filepath.Join(root, "base"), 0, 6)...)
			mid := append([]string{"../base"}, files(t, filepath.Join(root, "mid"), 100, 4)...)
			kust(t, filepath.Join(root, "mid"), "commonLabels: {mid: \"1\"}\n", mid...)
			top := append(files(t, filepath.Join(root, "top"), 200, 3), "../mid")
			kust(t, filepath.Join(root, "top"), "namespace: top\n", top...)
			return "top"
		}, true},
		{"two bases", func(t *testing.T, root string) string {
			kust(t, filepath.Join(root, "a"), "labels:\n- pairs: {base: a}\n", files(t, filepath.Join(root, "a"), 0, 5)...)
			kust(t, filepath.Join(root, "b"), "namespace: b\n", files(t, filepath.Join(root, "b"), 100, 5)...)
			kust(t, filepath.Join(root, "app"), "commonAnnotations: {app: x}\n", "../a", "../b")
			return "app"
		}, true},
		{"a base listed twice", func(t *testing.T, root string) string {
			kust(t, filepath.Join(root, "base"), "", files(t, filepath.Join(root, "base"), 0, 6)...)
			kust(t, filepath.Join(root, "app"), "", "../base", "../base")
			return "app"
		}, false},
		{"a base with namePrefix", func(t *testing.T, root string) string {
			kust(t, filepath.Join(root, "base"), "namePrefix: b-\n", files(t, filepath.Join(root, "base"), 0, 6)...)
			kust(t, filepath.Join(root, "app"), "", append([]string{"../base"}, files(t, filepath.Join(root, "app"), 100, 4)...)...)
			return "app"
		}, false},
		{"a folder without kustomization", func(t *testing.T, root string) string {
			files(t, filepath.Join(root, "plain"), 0, 6)
			kust(t, filepath.Join(root, "app"), "", append([]string{"../plain"}, files(t, filepath.Join(root, "app"), 100, 4)...)...)
			return "app"
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			rel := tc.setup(t, root)
			whole, got, wholeErr, gotErr, chunked := buildBoth(t, root, rel, 8)
			if chunked != tc.chunked {
				t.Errorf("built in chunks: %v, want %v", chunked, tc.chunked)
			}
			if fmt.Sprint(wholeErr) != fmt.Sprint(gotErr) {
				t.Fatalf("errors differ:\nwhole:   %v\nchunked: %v", wholeErr, gotErr)
			}
			if diff := cmp.Diff(whole, got); diff != "" {
				t.Errorf("output differs from krusty's (-whole +chunked):\n%s", diff)
			}
		})
	}
}
