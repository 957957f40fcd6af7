package sources

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

const overlayDeployment = `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: apps, labels: {app: web}}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - {name: web, image: "nginx:1.0"}
      - {name: side, image: "busybox:1.36"}
`

// overlayComponent is a kustomize Component, under comp/ in the trees below.
const overlayComponent = `apiVersion: kustomize.config.k8s.io/v1alpha1
kind: Component
patches:
- patch: |
    apiVersion: v1
    kind: ConfigMap
    metadata: {name: settings, namespace: apps}
    data: {fromComponent: "yes"}
`

// testOverlay sets every inline field: two patches (strategic merge with a target, and
// JSON6902), one of which targets nothing; an image the kustomization already overrides
// (its newTag replaced, its newName kept) and a new one; prefix, suffix; a component.
func testOverlay() *Overlay {
	return &Overlay{Setting: "spec",
		Patches: []Patch{
			{Patch: "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: any}\nspec: {replicas: 3}\n",
				Target: &PatchTarget{Kind: "Deployment", LabelSelector: "app=web"}},
			{Patch: `[{"op": "add", "path": "/data/patched", "value": "yes"}]`, Target: &PatchTarget{Kind: "ConfigMap", Name: "settings"}},
			{Patch: `[{"op": "add", "path": "/data/x", "value": "y"}]`, Target: &PatchTarget{Kind: "Secret", Name: "nothing-matches"}},
		},
		Images:     []Image{{Name: "nginx", NewTag: "1.27"}, {Name: "busybox", NewName: "mirror.example/busybox", Digest: "sha256:" + strings.Repeat("a", 64)}},
		NamePrefix: "pre-", NameSuffix: "-suf",
		Components: []string{"../comp"},
	}
}

// handWritten is testOverlay's fields as the kustomization would hold them written by hand:
// own fields first, then the Sync's (as Flux's generator appends them).
const handWrittenFields = `namePrefix: pre-
nameSuffix: -suf
components: [../comp]
patches:
- target: {kind: Deployment, labelSelector: app=web}
  patch: |
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: any}
    spec: {replicas: 3}
- target: {kind: ConfigMap, name: settings}
  patch: '[{"op": "add", "path": "/data/patched", "value": "yes"}]'
- target: {kind: Secret, name: nothing-matches}
  patch: '[{"op": "add", "path": "/data/x", "value": "y"}]'
`

// TestOverlayRendersAsHandWrittenKustomization: a Sync's inline build fields render the
// same objects as a kustomization that writes them, for a folder with a kustomization
// (merged with its own images) and for a plain folder (a kustomization generated over its
// manifests, as Flux generates one), in process and in a render child.
func TestOverlayRendersAsHandWrittenKustomization(t *testing.T) {
	digest := "sha256:" + strings.Repeat("a", 64)
	cases := []struct {
		name       string
		src, want  map[string]string
		inlineOnly bool
	}{{
		name: "kustomization",
		src: map[string]string{
			"app/kustomization.yaml": "resources: [deploy.yaml, settings.yaml]\nimages:\n- {name: nginx, newName: registry.example/nginx, newTag: \"1.0\"}\n",
			"app/deploy.yaml":        overlayDeployment, "app/settings.yaml": cm("settings", "apps"),
			"comp/kustomization.yaml": overlayComponent,
		},
		want: map[string]string{
			"app/kustomization.yaml": "resources: [deploy.yaml, settings.yaml]\n" + handWrittenFields +
				"images:\n- {name: nginx, newName: registry.example/nginx, newTag: \"1.27\"}\n- {name: busybox, newName: mirror.example/busybox, digest: " + digest + "}\n",
			"app/deploy.yaml": overlayDeployment, "app/settings.yaml": cm("settings", "apps"),
			"comp/kustomization.yaml": overlayComponent,
		},
	}, {
		name: "plain folder",
		src: map[string]string{
			"app/deploy.yaml": overlayDeployment, "app/more/settings.yaml": cm("settings", "apps"),
			"comp/kustomization.yaml": overlayComponent,
		},
		want: map[string]string{
			"app/kustomization.yaml": "resources: [deploy.yaml, more/settings.yaml]\n" + handWrittenFields +
				"images:\n- {name: nginx, newTag: \"1.27\"}\n- {name: busybox, newName: mirror.example/busybox, digest: " + digest + "}\n",
			"app/deploy.yaml": overlayDeployment, "app/more/settings.yaml": cm("settings", "apps"),
			"comp/kustomization.yaml": overlayComponent,
		},
	}}
	for _, c := range cases {
		for _, isolate := range []bool{false, true} {
			t.Run(c.name+map[bool]string{false: "", true: " isolated"}[isolate], func(t *testing.T) {
				opts := DefaultRenderOptions()
				opts.Isolate = isolate
				want, err := Render(t.Context(), writeTree(t, c.want), "app", opts)
				if err != nil {
					t.Fatalf("hand-written kustomization: %v", err)
				}
				opts.Overlay = testOverlay()
				got, err := Render(t.Context(), writeTree(t, c.src), "app", opts)
				if err != nil {
					t.Fatalf("inline fields: %v", err)
				}
				if d := cmp.Diff(contents(want), contents(got)); d != "" {
					t.Errorf("inline fields render differently from the hand-written kustomization (-want +got):\n%s", d)
				}
				if n := got[0].GetName(); n != "pre-settings-suf" && n != "pre-web-suf" {
					t.Errorf("first object is named %q: the fields were not applied", n)
				}
			})
		}
	}
}

func contents(objs []*unstructured.Unstructured) []map[string]any {
	out := make([]map[string]any, len(objs))
	for i, o := range objs {
		out[i] = o.Object
	}
	return out
}

// TestOverlayComponentOutsideSourceRefused: a component that climbs out of the source, is
// absolute, is a URL or is a symlink out of the source is refused before anything is
// built, naming the Sync field and the path, as terminal bad input.
func TestOverlayComponentOutsideSourceRefused(t *testing.T) {
	outside := writeTree(t, map[string]string{"comp/kustomization.yaml": overlayComponent})
	dir := writeTree(t, map[string]string{
		"app/kustomization.yaml": "resources: [settings.yaml]\n", "app/settings.yaml": cm("settings", "apps"),
		"app/link": "symlink:" + outside + "/comp",
	})
	for _, c := range []string{"../../etc", "../..", "/etc", outside + "/comp", "link", "https://example.com/comp", `..\..\etc`} {
		for _, err := range componentErrors(t, dir, c) {
			if strings.Contains(err.Error(), outside) && c != outside+"/comp" {
				t.Errorf("component %q: the error names the symlink's target: %v", c, err)
			}
		}
	}
	opts := DefaultRenderOptions()
	opts.Overlay = &Overlay{Setting: "spec", Components: []string{"missing"}, IgnoreMissingComponents: true}
	if _, err := Render(t.Context(), dir, "app", opts); err != nil {
		t.Errorf("a missing component with ignoreMissingComponents: %v", err)
	}
	opts.Overlay.IgnoreMissingComponents = false
	if _, err := Render(t.Context(), dir, "app", opts); !errors.Is(err, ErrPathNotFound) {
		t.Errorf("a missing component: want ErrPathNotFound, got %v", err)
	}
}

// componentErrors renders dir's folder app with the one component c, in the process and
// isolated, and returns both errors, each checked to be terminal and to name
// spec.components[0] and c.
func componentErrors(t *testing.T, dir, c string) []error {
	t.Helper()
	var errs []error
	for _, isolate := range []bool{false, true} {
		opts := DefaultRenderOptions()
		opts.Isolate = isolate
		opts.Overlay = &Overlay{Setting: "spec", Components: []string{c}}
		_, err := Render(t.Context(), dir, "app", opts)
		if err == nil {
			t.Fatalf("component %q rendered", c)
		}
		if !IsTerminal(err) || !strings.Contains(err.Error(), "spec.components[0]") || !strings.Contains(err.Error(), fmt.Sprintf("%q", c)) {
			t.Errorf("component %q: want a terminal error naming spec.components[0] and the path, got %v", c, err)
		}
		errs = append(errs, err)
	}
	return errs
}

// TestOverlayComponentNotAComponentRefused: a component that is the rendered folder itself,
// a folder with no kustomization, or one whose kustomization is not of kind Component is
// refused before the build, naming the Sync field and the path, as terminal bad input.
func TestOverlayComponentNotAComponentRefused(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"app/kustomization.yaml": "resources: [settings.yaml]\n", "app/settings.yaml": cm("settings", "apps"),
		"app/sub/x.yaml": cm("x", "apps"), "plain/x.yaml": cm("y", "apps"),
		"base/kustomization.yaml": "resources: []\n", "comp/kustomization.yaml": overlayComponent,
	})
	for c, want := range map[string]string{".": "the rendered folder itself", "./": "the rendered folder itself", "sub/..": "the rendered folder itself",
		"../plain": "no kustomization", "../base": "not a Component"} {
		for _, err := range componentErrors(t, dir, c) {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("component %q: want an error saying %q, got %v", c, want, err)
			}
		}
	}
	opts := DefaultRenderOptions()
	opts.Overlay = &Overlay{Setting: "spec", Components: []string{"../comp"}}
	if _, err := Render(t.Context(), dir, "app", opts); err != nil {
		t.Errorf("a Component: %v", err)
	}
}

// TestOverlayMalformedPatchNamesField: a patch kustomize cannot read fails the render as
// terminal bad input naming the Sync field, the render's other patches notwithstanding.
func TestOverlayMalformedPatchNamesField(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"app/kustomization.yaml": "resources: [settings.yaml]\n", "app/settings.yaml": cm("settings", "apps"),
	})
	good := Patch{Patch: `[{"op": "add", "path": "/data/a", "value": "b"}]`, Target: &PatchTarget{Kind: "ConfigMap"}}
	for name, bad := range map[string]Patch{
		"not yaml":        {Patch: "kind: ConfigMap\nmetadata: {name: [\n", Target: &PatchTarget{Kind: "ConfigMap"}},
		"empty":           {Patch: "  \n"},
		"no kind":         {Patch: "metadata: {name: settings}\ndata: {a: b}\n"},
		"op without op":   {Patch: `[{"path": "/data/a", "value": "b"}]`, Target: &PatchTarget{Kind: "ConfigMap"}},
		"scalar":          {Patch: "just text", Target: &PatchTarget{Kind: "ConfigMap"}},
		"two with target": {Patch: "kind: ConfigMap\nmetadata: {name: a}\n---\nkind: ConfigMap\nmetadata: {name: b}\n", Target: &PatchTarget{Kind: "ConfigMap"}},
	} {
		t.Run(name, func(t *testing.T) {
			opts := DefaultRenderOptions()
			opts.Isolate = true
			opts.Overlay = &Overlay{Setting: "spec", Patches: []Patch{good, bad}}
			objs, err := Render(t.Context(), dir, "app", opts)
			if err == nil || !IsTerminal(err) || !strings.Contains(err.Error(), "spec.patches[1]") {
				t.Fatalf("want a terminal error naming spec.patches[1], got %v (%d objects)", err, len(objs))
			}
		})
	}
}

// TestOverlayRefusedOnChartAndFile: the fields extend a kustomize build; a chart or a single
// file refuses them with a message saying where they belong.
func TestOverlayRefusedOnChartAndFile(t *testing.T) {
	dir := writeTree(t, map[string]string{"app/settings.yaml": cm("settings", "apps")})
	opts := DefaultRenderOptions()
	opts.Overlay = &Overlay{Setting: "spec", NamePrefix: "p-"}
	if _, err := Render(t.Context(), dir, "app/settings.yaml", opts); err == nil || !IsTerminal(err) {
		t.Errorf("a file path: want a terminal error, got %v", err)
	}
	opts.Helm = &HelmOptions{ReleaseName: "r"}
	if _, err := Render(t.Context(), dir, "app", opts); err == nil || !strings.Contains(err.Error(), "postRenderers") {
		t.Errorf("a chart: want an error pointing at postRenderers, got %v", err)
	}
}

// TestOverlayPatchFailingInBuildNamesFields: a patch that reads but cannot apply (a JSON6902
// replace of a missing field) fails the build, naming the inline fields it was built with.
func TestOverlayPatchFailingInBuildNamesFields(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"app/kustomization.yaml": "resources: [settings.yaml]\n", "app/settings.yaml": cm("settings", "apps"),
	})
	opts := DefaultRenderOptions()
	opts.Isolate = true
	opts.Overlay = &Overlay{Setting: "spec", Patches: []Patch{{Patch: `[{"op": "replace", "path": "/spec/missing", "value": 1}]`,
		Target: &PatchTarget{Kind: "ConfigMap"}}}}
	_, err := Render(t.Context(), dir, "app", opts)
	if err == nil || !IsTerminal(err) || !strings.Contains(err.Error(), "spec.patches") {
		t.Fatalf("want a terminal error naming spec.patches, got %v", err)
	}
}
