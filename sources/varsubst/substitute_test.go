package varsubst

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/sources"
)

// load renders files (name → content) of a plain YAML folder, so objects carry real origins.
func load(t *testing.T, files map[string]string) *sources.Bundle {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	b, err := sources.NewLoader(t.TempDir()).Load(context.Background(), sources.Source{Dir: dir, Path: "."}, sources.DefaultLoadOptions())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func merge(t *testing.T, srcs ...Source) Variables {
	t.Helper()
	v, err := Merge(srcs...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// stream prints the objects of b as build does, to compare whole results.
func stream(t *testing.T, b *sources.Bundle) string {
	t.Helper()
	var parts []string
	for _, o := range b.Objects {
		y, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, string(y))
	}
	return strings.Join(parts, "---\n")
}

const cm = `apiVersion: v1
kind: ConfigMap
metadata:
  name: app
  namespace: apps
data:
  %s
`

func TestExpand(t *testing.T) {
	vars := Source{Name: "spec.postBuild.substitute", Values: map[string]string{"ENV": "prod", "EMPTY": "", "REPLICAS": "3", "VERSION": `"1.10"`}}
	tests := []struct {
		name   string
		data   string
		strict bool
		want   string // the data map after substitution
	}{
		{name: "value", data: `k: ${ENV}`, want: `k: prod`},
		{name: "inside text", data: `k: db-${ENV}.internal`, want: `k: db-prod.internal`},
		{name: "default :=", data: `k: ${MISSING:=fallback}`, want: `k: fallback`},
		{name: "default :-", data: `k: ${MISSING:-fallback}`, want: `k: fallback`},
		{name: "default on empty", data: `k: ${EMPTY:=fallback}`, want: `k: fallback`},
		{name: "set wins over default", data: `k: ${ENV:=fallback}`, want: `k: prod`},
		{name: "missing, not strict, is empty", data: `k: a${MISSING}b`, want: `k: ab`},
		{name: "default in strict", data: `k: ${MISSING:=fallback}`, strict: true, want: `k: fallback`},
		{name: "empty value in strict", data: `k: a${EMPTY}b`, strict: true, want: `k: ab`},
		{name: "escape", data: `k: $${ENV}`, want: `k: ${ENV}`},
		{name: "escaped dollar alone", data: `k: a$$b`, want: `k: a$b`},
		{name: "bare $var untouched", data: `k: $ENV`, want: `k: $ENV`},
		{name: "YAML typed after substitution", data: `k: ${REPLICAS}`, want: `k: 3`},
		// Unlike Flux (kustomize keeps a scalar's quotes), the render has decoded the YAML:
		// quotes around a reference in the source are not seen. Quotes in the value are.
		{name: "source quotes not seen", data: `k: '${REPLICAS}'`, want: `k: 3`},
		{name: "quotes in the value", data: `k: ${VERSION}`, want: `k: "1.10"`},
		{name: "key", data: `${ENV}-key: v`, want: `prod-key: v`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := load(t, map[string]string{"cm.yaml": strings.Replace(cm, "%s", tt.data, 1)})
			before := stream(t, b)
			got, err := Expand(b, merge(t, vars), Options{Strict: tt.strict})
			if err != nil {
				t.Fatal(err)
			}
			js, err := yaml.YAMLToJSON([]byte(tt.want))
			if err != nil {
				t.Fatal(err)
			}
			var data map[string]any
			if err := utiljson.Unmarshal(js, &data); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(data, got.Objects[0].Object["data"]); d != "" {
				t.Errorf("data (-want +got):\n%s", d)
			}
			if stream(t, b) != before {
				t.Error("Expand modified the bundle it was given (shared with the render cache)")
			}
		})
	}
}

func TestExpandDisabled(t *testing.T) {
	const objects = `apiVersion: v1
kind: ConfigMap
metadata:
  name: flux-annotation
  annotations:
    kustomize.toolkit.fluxcd.io/substitute: disabled
data:
  k: ${ENV}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: converge-annotation
  annotations:
    converge.dev/substitute: disabled
data:
  k: ${ENV}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: flux-label
  labels:
    kustomize.toolkit.fluxcd.io/substitute: disabled
data:
  k: ${ENV}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: converge-label
  labels:
    converge.dev/substitute: disabled
data:
  k: ${ENV}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: enabled
data:
  k: ${ENV}
`
	b := load(t, map[string]string{"cms.yaml": objects})
	got, err := Expand(b, merge(t, Source{Values: map[string]string{"ENV": "prod"}}), Options{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"flux-annotation": "${ENV}", "converge-annotation": "${ENV}",
		"flux-label": "${ENV}", "converge-label": "${ENV}", "enabled": "prod"}
	gotData := map[string]string{}
	for i, o := range got.Objects {
		gotData[o.GetName()] = o.Object["data"].(map[string]any)["k"].(string)
		if o.GetName() != "enabled" && o != b.Objects[i] {
			t.Errorf("%s: a disabled object was copied; it should be shared", o.GetName())
		}
	}
	if d := cmp.Diff(want, gotData); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

func TestExpandErrors(t *testing.T) {
	vars := Source{Values: map[string]string{"ENV": "prod", "BROKEN": "a: b: c", "OPEN": "[x", "NAME": "same"}}
	const second = `apiVersion: v1
kind: ConfigMap
metadata:
  name: first
data:
  k: v
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: second
data:
  k: %s
`
	tests := []struct {
		name   string
		files  map[string]string
		strict bool
		want   []string // substrings of the error
	}{
		{name: "strict missing variable", strict: true,
			files: map[string]string{"cms.yaml": strings.Replace(second, "%s", "${ENV}-${REGION}", 1)},
			want:  []string{"cms.yaml:8 (document 2 of 2): ConfigMap second: ", `variable "REGION" has no value and no default (postBuild.strict)`}},
		{name: "invalid YAML after substitution",
			files: map[string]string{"cms.yaml": strings.Replace(second, "%s", "${BROKEN}", 1)},
			want:  []string{"cms.yaml:8 (document 2 of 2): ConfigMap second: substitution made invalid YAML"}},
		{name: "unclosed flow sequence",
			files: map[string]string{"cms.yaml": strings.Replace(second, "%s", "${OPEN}", 1)},
			want:  []string{"cms.yaml:8 (document 2 of 2): ConfigMap second: substitution made invalid YAML"}},
		{name: "unclosed reference",
			files: map[string]string{"cms.yaml": strings.Replace(second, "%s", "'${ENV'", 1)},
			want:  []string{"ConfigMap second: substitution: missing closing brace"}},
		{name: "name emptied",
			files: map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${MISSING}\n  namespace: ${MISSING}\n"},
			want:  []string{"cm.yaml:1: ConfigMap ${MISSING}/${MISSING}: after substitution: metadata.name is missing or not a string"}},
		{name: "duplicate after substitution",
			files: map[string]string{"a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${NAME}\n",
				"b.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: same\n"},
			want: []string{"b.yaml:1: ConfigMap same: after substitution: duplicate object, also defined in a.yaml:1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := load(t, tt.files)
			got, err := Expand(b, merge(t, vars), Options{Strict: tt.strict})
			if err == nil {
				t.Fatalf("no error; objects:\n%s", stream(t, got))
			}
			if got != nil {
				t.Error("a bundle came back with the error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if !sources.IsTerminal(err) {
				t.Errorf("not an input error: %v", err)
			}
		})
	}
}

// TestExpandNoVariables: with no variable, nothing is substituted (Flux's default
// substituteStrategy), not even defaults, and the same bundle comes back.
func TestExpandNoVariables(t *testing.T) {
	b := load(t, map[string]string{"cm.yaml": strings.Replace(cm, "%s", "k: ${MISSING:=x}-${OTHER}", 1)})
	got, err := Expand(b, Variables{}, Options{Strict: true})
	if err != nil || got != b {
		t.Fatalf("got %v, %v; want the same bundle", got, err)
	}
}

// TestExpandShares: objects without a reference are shared, not copied.
func TestExpandShares(t *testing.T) {
	b := load(t, map[string]string{"cms.yaml": strings.Replace(cm, "%s", "k: v", 1) + "---\n" +
		strings.Replace(strings.Replace(cm, "name: app", "name: other", 1), "%s", "k: ${ENV}", 1)})
	got, err := Expand(b, merge(t, Source{Values: map[string]string{"ENV": "prod"}}), DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if got == b || got.Objects[0] != b.Objects[0] || got.Objects[1] == b.Objects[1] {
		t.Error("want a new bundle sharing the unchanged object and copying the changed one")
	}
	if d := cmp.Diff(b.Origins, got.Origins); d != "" {
		t.Error(d)
	}
}

func TestMerge(t *testing.T) {
	v, err := Merge(
		Source{Name: "ConfigMap apps/a", Values: map[string]string{"A": "from-a", "B": "from-a"}},
		Source{Name: "Secret apps/s", Values: map[string]string{"B": "from-secret\n", "C": "line1\nline2"}, Sensitive: true},
		Source{Name: "spec.postBuild.substitute", Values: map[string]string{"C": "inline"}},
	)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[string]string{"A": "from-a", "B": "from-secret", "C": "inline"}, v.values); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	// The overridden Secret value is hidden too: it was read.
	if got := v.Redactor().String("from-secret line1line2 from-a"); got != "*** *** from-a" {
		t.Errorf("redacted: %q", got)
	}

	_, err = Merge(Source{Name: "ConfigMap apps/vars", Values: map[string]string{"ok": "1", "my-var": "x", "1st": "y"}})
	for _, w := range []string{`ConfigMap apps/vars: key "1st" is not a valid variable name`, `ConfigMap apps/vars: key "my-var" is not a valid variable name`} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v does not contain %q", err, w)
		}
	}
}

func TestRedactor(t *testing.T) {
	r := NewRedactor([]string{"s3cr3t-value", `pa"ss\word`, "abc", "s3cr3t"})
	tests := []struct{ in, want string }{
		{"label value s3cr3t-value is invalid", "label value *** is invalid"},
		{`Invalid value: "pa\"ss\\word"`, `Invalid value: "***"`},
		{`raw pa"ss\word`, `raw ***`},
		{"short abc stays", "short abc stays"},
		{"s3cr3t alone", "*** alone"},
	}
	for _, tt := range tests {
		if got := r.String(tt.in); got != tt.want {
			t.Errorf("String(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	base := errors.New("apply: s3cr3t-value refused")
	err := r.Error(base)
	if err.Error() != "apply: *** refused" || !errors.Is(err, base) {
		t.Errorf("Error: %v (Is: %t)", err, errors.Is(err, base))
	}
	var none *Redactor
	if none.String("s3cr3t") != "s3cr3t" || NewRedactor([]string{"ab"}) != nil {
		t.Error("a nil Redactor, or one of only short values, must change nothing")
	}
}

// TestSerializeIsYAMLMarshal: serialize writes what sigs.k8s.io/yaml.Marshal writes, quotes
// and number forms included, so the text substituted is the text a person sees.
func TestSerializeIsYAMLMarshal(t *testing.T) {
	obj := map[string]any{
		"n": "y", "on": "off", "yes": []any{"no", "NO", "True", "~", "null", ""},
		"int": int64(3), "big": int64(1) << 62, "neg": int64(-7),
		"bool": true, "nil": nil, "empty": map[string]any{}, "list": []any{},
		"str": map[string]any{"num": "3", "float": "1.10", "octal": "0o17", "date": "2001-12-14", "colon": "a: b",
			"hash": "a #b", "lead": " x", "multi": "a\nb\n", "unicode": "żółw", "ref": "${x}", "quote": `it's "q"`, "star": "*x", "brace": "{x}"},
	}
	want, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	got, err := serialize(obj)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(string(want), string(got)); d != "" {
		t.Errorf("(-yaml.Marshal +serialize):\n%s", d)
	}
	// Floats take yaml.Marshal's way.
	obj["list"] = []any{1.5, 1e6, 1e-7}
	want, _ = yaml.Marshal(obj)
	if got, err = serialize(obj); err != nil || string(got) != string(want) {
		t.Errorf("with floats: %v\n%s\nwant\n%s", err, got, want)
	}
}
