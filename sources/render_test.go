package sources

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// writeTree writes files (slash paths to contents) under a new temporary directory.
// A content starting with "symlink:" creates a symlink to the rest of it.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if target, ok := strings.CutPrefix(content, "symlink:"); ok {
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func ids(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.GetAPIVersion()+" "+ObjectID(o))
	}
	return out
}

func cm(name, ns string) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n  namespace: " + ns + "\ndata:\n  k: v\n"
}

func TestRenderPlain(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"apps/b.yaml": "# leading comment\n---\n" + cm("b1", "apps") + "---\n\n---\n# only a comment\n--- # separator with comment\n" + cm("b2", "apps"),
		"apps/a.yml":  cm("a", "apps"),
		"apps/sub/deploy.yaml": `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: apps}
spec: {replicas: 3}
`,
		"apps/c.json":                      `{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}}`,
		"apps/list.yaml":                   "apiVersion: v1\nkind: List\nitems:\n- " + strings.ReplaceAll(cm("l1", "apps"), "\n", "\n  ") + "\n- " + strings.ReplaceAll(cm("l2", "apps"), "\n", "\n  "),
		"apps/README.md":                   "not yaml: [",
		"apps/.github/ci.yml":              "on: push\n",
		"apps/.hidden.yaml":                "not: a manifest\n",
		"apps/nested-k/kustomization.yaml": "resources: [svc.yaml]\nnamePrefix: k-\n",
		"apps/nested-k/svc.yaml":           "apiVersion: v1\nkind: Service\nmetadata: {name: svc, namespace: apps}\n",
		"outside.yaml":                     cm("outside", "default"),
	})
	objs, err := Render(t.Context(), dir, "apps", DefaultRenderOptions())
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	want := []string{
		"v1 ConfigMap apps/a",
		"v1 ConfigMap apps/b1",
		"v1 ConfigMap apps/b2",
		"v1 Namespace apps",
		"v1 ConfigMap apps/l1",
		"v1 ConfigMap apps/l2",
		"v1 Service apps/k-svc",
		"apps/v1 Deployment apps/web",
	}
	if diff := cmp.Diff(want, ids(objs)); diff != "" {
		t.Errorf("objects (-want +got):\n%s", diff)
	}
	replicas, _, err := unstructured.NestedInt64(objs[len(objs)-1].Object, "spec", "replicas")
	if err != nil || replicas != 3 {
		t.Errorf("replicas = %d, %v; want int64 3", replicas, err)
	}

	one, err := Render(t.Context(), dir, "apps/sub/deploy.yaml", DefaultRenderOptions())
	if err != nil {
		t.Fatalf("Render one file: %v", err)
	}
	if diff := cmp.Diff([]string{"apps/v1 Deployment apps/web"}, ids(one)); diff != "" {
		t.Errorf("one file (-want +got):\n%s", diff)
	}
}

func TestRenderKustomize(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"base/kustomization.yaml": "resources: [deploy.yaml, svc.yaml]\n",
		"base/deploy.yaml": `apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 1
  template:
    spec:
      containers: [{name: web, image: nginx}]
`,
		"base/svc.yaml": "apiVersion: v1\nkind: Service\nmetadata: {name: web}\n",
		"overlays/prod/kustomization.yml": `resources: [../../base]
namespace: prod
namePrefix: prod-
patches:
- path: replicas.yaml
configMapGenerator:
- name: settings
  files: [settings.env]
generatorOptions: {disableNameSuffixHash: true}
`,
		"overlays/prod/replicas.yaml": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {replicas: 5}\n",
		"overlays/prod/settings.env":  "LEVEL=info\n",
	})
	objs, err := Render(t.Context(), dir, "overlays/prod", DefaultRenderOptions())
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	want := []string{"apps/v1 Deployment prod/prod-web", "v1 Service prod/prod-web", "v1 ConfigMap prod/prod-settings"}
	if diff := cmp.Diff(want, ids(objs)); diff != "" {
		t.Errorf("objects (-want +got):\n%s", diff)
	}
	replicas, _, _ := unstructured.NestedInt64(objs[0].Object, "spec", "replicas")
	if diff := cmp.Diff(int64(5), replicas); diff != "" {
		t.Errorf("patched replicas (-want +got):\n%s", diff)
	}
	data, _, _ := unstructured.NestedStringMap(objs[2].Object, "data")
	if diff := cmp.Diff(map[string]string{"settings.env": "LEVEL=info\n"}, data); diff != "" {
		t.Errorf("generated data (-want +got):\n%s", diff)
	}
}

// TestRenderConcurrent renders kustomizations and plain folders at once; with -race it
// checks that builds are serialized and decoding shares nothing.
func TestRenderConcurrent(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"k/kustomization.yaml": "resources: [cm.yaml]\nnamePrefix: p-\n",
		"k/cm.yaml":            cm("x", "default"),
		"plain/a.yaml":         cm("a", "default") + "---\n" + cm("b", "default"),
	})
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			_, err := Render(t.Context(), dir, []string{"k", "plain"}[i%2], RenderOptions{Workers: 2})
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

func TestRenderBadInput(t *testing.T) {
	outside := writeTree(t, map[string]string{"secret.yaml": cm("stolen", "default")})
	tests := []struct {
		name  string
		files map[string]string
		path  string
		want  []string // substrings of the error message
		is    error
	}{
		{
			name:  "missing apiVersion",
			files: map[string]string{"apps/web.yaml": cm("ok", "apps") + "---\nkind: ConfigMap\nmetadata: {name: web, namespace: apps}\n"},
			path:  "apps",
			want:  []string{"apps/web.yaml:9: document 2 of 2: ConfigMap apps/web: missing apiVersion"},
		},
		{
			name:  "missing kind",
			files: map[string]string{"web.yaml": "apiVersion: v1\nmetadata: {name: web}\n"},
			want:  []string{"web.yaml:1: <no kind> web: missing kind"},
		},
		{
			name:  "missing metadata.name",
			files: map[string]string{"apps/web.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {namespace: apps}\n"},
			want:  []string{"apps/web.yaml:1: ConfigMap: missing metadata.name"},
		},
		{
			name:  "missing metadata",
			files: map[string]string{"web.yaml": "apiVersion: v1\nkind: ConfigMap\n"},
			want:  []string{"web.yaml:1: ConfigMap: missing metadata.name"},
		},
		{
			name:  "list item without name",
			files: map[string]string{"list.yaml": "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Secret, metadata: {}}\n"},
			want:  []string{"list.yaml:1: Secret: item 1 of 1: missing metadata.name"},
		},
		{
			name: "duplicate object across files",
			files: map[string]string{
				"a.yaml":     cm("one", "apps") + "---\n" + cm("dup", "apps"),
				"sub/b.yaml": cm("dup", "apps"),
			},
			want: []string{"sub/b.yaml:1: ConfigMap apps/dup: duplicate object, also defined in a.yaml:9 (document 2 of 2)"},
		},
		{
			name:  "invalid YAML",
			files: map[string]string{"apps/bad.yaml": cm("ok", "apps") + "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n bad: indent\n"},
			want:  []string{"apps/bad.yaml:12: document 2 of 2: invalid YAML: did not find expected key"},
		},
		{
			// YAML 1.1 reads an unquoted y as true: the message says so, not "missing".
			name:  "name read as a boolean",
			files: map[string]string{"app/y.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: y\n"},
			want:  []string{"app/y.yaml:1: ConfigMap: metadata.name is the boolean true, not a string", "quote the value"},
		},
		{
			name:  "namespace read as a number",
			files: map[string]string{"app/n.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  namespace: 2024\n"},
			want:  []string{"app/n.yaml:1: ConfigMap a: metadata.namespace is the number 2024, not a string"},
		},
		{
			// One line number, the file's: not the document's start and a second one inside.
			name:  "invalid YAML in the first document",
			files: map[string]string{"app/g2.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  k: [unclosed\n"},
			want:  []string{"app/g2.yaml:6: invalid YAML: did not find expected ',' or ']'"},
		},
		{
			name:  "invalid JSON",
			files: map[string]string{"x/c.json": "{\n\"apiVersion\": \"v1\",\n\"kind\": \n}"},
			want:  []string{"x/c.json:4: invalid JSON: invalid character '}' looking for beginning of value"},
		},
		{
			name:  "document is a list",
			files: map[string]string{"seq.yaml": "- a\n- b\n"},
			want:  []string{"seq.yaml:1: document is not a mapping"},
		},
		{
			name:  "several bad files are all reported",
			files: map[string]string{"a.yaml": "kind: A\nmetadata: {name: a}\n", "b.yaml": "kind: B\nmetadata: {name: b}\n"},
			want:  []string{"a.yaml:1: A a: missing apiVersion", "b.yaml:1: B b: missing apiVersion"},
		},
		{
			name:  "path escapes with ..",
			files: map[string]string{"a.yaml": cm("a", "default")},
			path:  "../x",
			want:  []string{"../x: path leads outside the source"},
			is:    ErrPathEscape,
		},
		{
			name:  "path symlink escapes",
			files: map[string]string{"link": "symlink:" + outside},
			path:  "link",
			want:  []string{"link: symlink points outside the source"},
			is:    ErrPathEscape,
		},
		{
			name:  "file symlink escapes",
			files: map[string]string{"apps/a.yaml": cm("a", "default"), "apps/steal.yaml": "symlink:" + filepath.Join(outside, "secret.yaml")},
			path:  "apps",
			want:  []string{"apps/steal.yaml: symlink points outside the source"},
			is:    ErrPathEscape,
		},
		{
			name:  "path does not exist",
			files: map[string]string{"a.yaml": cm("a", "default")},
			path:  "clusters/prod",
			want:  []string{"clusters/prod: path does not exist in the source"},
			is:    ErrPathNotFound,
		},
		{
			name:  "empty render",
			files: map[string]string{"apps/a.yaml": "# nothing yet\n---\n", "apps/README.md": "hi"},
			path:  "apps",
			want:  []string{"apps: rendered no objects"},
			is:    ErrEmptyRender,
		},
		{
			name: "broken kustomization",
			files: map[string]string{
				"overlay/kustomization.yaml": "resources: [missing.yaml]\n",
			},
			path: "overlay",
			want: []string{"overlay/kustomization.yaml: kustomize build:", "missing.yaml"},
		},
		{
			name:  "kustomization is not YAML",
			files: map[string]string{"k/kustomization.yaml": "resources: [a\n"},
			path:  "k",
			want:  []string{"k/kustomization.yaml: invalid kustomization"},
		},
		{
			name:  "remote base refused",
			files: map[string]string{"k/kustomization.yaml": "resources:\n- https://github.com/kubernetes-sigs/kustomize//examples/helloWorld?ref=v3.3.1\n"},
			path:  "k",
			want:  []string{`k/kustomization.yaml: resources[0]: remote bases are disabled: refusing "https://github.com/kubernetes-sigs/kustomize//examples/helloWorld?ref=v3.3.1"`},
			is:    ErrRemoteBase,
		},
		{
			name: "remote base in a local base refused",
			files: map[string]string{
				"overlay/kustomization.yaml": "resources: [../base]\n",
				"base/kustomization.yaml":    "resources:\n- github.com/org/repo//deploy?ref=main\n",
			},
			path: "overlay",
			want: []string{`base/kustomization.yaml: resources[0]: remote bases are disabled: refusing "github.com/org/repo//deploy?ref=main"`},
			is:   ErrRemoteBase,
		},
		{
			name: "kustomize cannot read outside the source",
			files: map[string]string{
				"k/kustomization.yaml": "resources: [../../" + filepath.Base(outside) + "]\n",
			},
			path: "k",
			want: []string{"k/kustomization.yaml: resources[0]: path leads outside the source: \"../../" + filepath.Base(outside) + "\""},
			is:   ErrPathEscape,
		},
		{
			name: "kustomize output is validated",
			files: map[string]string{
				"k/kustomization.yaml": "resources: [cm.yaml]\n",
				"k/cm.yaml":            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n",
			},
			path: "k",
			want: []string{"k/kustomization.yaml: kustomize build:", "already registered id"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeTree(t, tt.files)
			path := tt.path
			if path == "" {
				path = "."
			}
			objs, err := Render(t.Context(), dir, path, DefaultRenderOptions())
			if err == nil {
				t.Fatalf("Render returned %d objects and no error", len(objs))
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error:\n%v\nwant it to contain:\n%s", err, w)
				}
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v is not %v", err, tt.is)
			}
			if !IsTerminal(err) {
				t.Errorf("IsTerminal(%v) = false, want true", err)
			}
			if strings.Contains(err.Error(), "stolen") {
				t.Errorf("error shows content from outside the source: %v", err)
			}
		})
	}
}

func TestIsTerminal(t *testing.T) {
	input := &InputError{File: "a.yaml", Err: errors.New("missing kind")}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{name: "nil", err: nil, want: false},
		{name: "input error", err: input, want: true},
		{name: "wrapped input error", err: errors.Join(input, input), want: true},
		{name: "empty render", err: ErrEmptyRender, want: true},
		{name: "network", err: errors.New("dial tcp: connection refused"), want: false},
		{name: "input and network", err: errors.Join(input, errors.New("read: i/o timeout")), want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, IsTerminal(tt.err)); diff != "" {
				t.Errorf("IsTerminal (-want +got):\n%s", diff)
			}
		})
	}
}

func TestJoinErrorsBounded(t *testing.T) {
	files := map[string]string{}
	for i := range 25 {
		files[string(rune('a'+i))+".yaml"] = "kind: X\nmetadata: {name: x}\n"
	}
	_, err := Render(t.Context(), writeTree(t, files), ".", DefaultRenderOptions())
	if got := strings.Count(err.Error(), "missing apiVersion"); got != maxErrors {
		t.Errorf("error lists %d failures, want %d:\n%v", got, maxErrors, err)
	}
	if !strings.Contains(err.Error(), "15 more errors") || !IsTerminal(err) {
		t.Errorf("error should count the rest and stay terminal: %v", err)
	}
}
