package sources

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestSetTargetPath: a targetPath value lands at its --set path, typed as Flux types it,
// taken whole (a comma or a brace is not --set syntax here), over what is there.
func TestSetTargetPath(t *testing.T) {
	for _, tc := range []struct {
		name, path, value string
		want              map[string]any
	}{
		{name: "string", path: "image.tag", value: "v1.2.3", want: map[string]any{"image": map[string]any{"tag": "v1.2.3", "repo": "web"}}},
		{name: "integer", path: "replicas", value: "3", want: map[string]any{"replicas": int64(3), "image": map[string]any{"repo": "web"}}},
		{name: "zero-led stays a string", path: "zip", value: "0123", want: map[string]any{"zip": "0123", "image": map[string]any{"repo": "web"}}},
		{name: "boolean", path: "a.on", value: "true", want: map[string]any{"a": map[string]any{"on": true}, "image": map[string]any{"repo": "web"}}},
		{name: "quoted", path: "a", value: `"true"`, want: map[string]any{"a": "true", "image": map[string]any{"repo": "web"}}},
		{name: "comma and brace kept", path: "a", value: "{x,y}=z", want: map[string]any{"a": "{x,y}=z", "image": map[string]any{"repo": "web"}}},
		{name: "list index", path: "hosts[1]", value: "b.example.com", want: map[string]any{"hosts": []any{nil, "b.example.com"}, "image": map[string]any{"repo": "web"}}},
		{name: "escaped dot", path: `annotations.example\.com/team`, value: "web", want: map[string]any{"annotations": map[string]any{"example.com/team": "web"}, "image": map[string]any{"repo": "web"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vals := map[string]any{"image": map[string]any{"repo": "web"}}
			if err := SetTargetPath(vals, tc.path, tc.value); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, vals); diff != "" {
				t.Errorf("values (-want +got):\n%s", diff)
			}
		})
	}
}

// TestMergeValues: maps merge key by key, anything else of the later document replaces.
func TestMergeValues(t *testing.T) {
	dst := map[string]any{"a": map[string]any{"x": 1.0, "y": 1.0}, "b": []any{1.0}, "c": "keep"}
	src := map[string]any{"a": map[string]any{"y": 2.0, "z": 2.0}, "b": []any{2.0}, "d": map[string]any{"n": nil}}
	want := map[string]any{"a": map[string]any{"x": 1.0, "y": 2.0, "z": 2.0}, "b": []any{2.0}, "c": "keep", "d": map[string]any{"n": nil}}
	if diff := cmp.Diff(want, MergeValues(dst, src)); diff != "" {
		t.Errorf("merged (-want +got):\n%s", diff)
	}
}

// TestSetTargetPathBoundsWhatItAllocates: a targetPath list index past 999 is refused
// before strvals allocates its slots (each [65536] allocated a 1 MiB list: 35 in a 247-
// character path took 35 MiB from a 1-byte value), and the values' size counts the slots a
// path makes.
func TestSetTargetPathBoundsWhatItAllocates(t *testing.T) {
	vals := map[string]any{}
	if err := SetTargetPath(vals, "a[1000]", "1"); err == nil || !strings.Contains(err.Error(), "at most 999") {
		t.Errorf("index 1000: %v, want refused", err)
	}
	if err := SetTargetPath(vals, "a[999][999][999]", "1"); err != nil {
		t.Fatal(err)
	}
	if n := ValuesSize(vals, 4<<20); n < 3*1000 {
		t.Errorf("values of three lists of 1,000 slots estimated at %d bytes", n)
	}
}

// TestSecretLeavesRedactedAsTemplatesPrint: a Secret's number is hidden as toYaml and int
// print it (12345678), not only as fmt does (1.2345678e+07), and each line of a multi-line
// value on its own (without it: a chart's fail (toYaml .Values.db) showed the PIN).
func TestSecretLeavesRedactedAsTemplatesPrint(t *testing.T) {
	got := AppendLeaves(nil, map[string]any{"pin": float64(12345678), "key": "-----BEGIN KEY-----\nAbCdEfGh\n-----END KEY-----\n"})
	for _, want := range []string{"12345678", "AbCdEfGh", "-----BEGIN KEY-----"} {
		if !slices.Contains(got, want) {
			t.Errorf("%q not among the redacted forms %q", want, got)
		}
	}
}
