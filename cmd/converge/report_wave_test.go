package main

import (
	"bytes"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/cli-utils/pkg/object"

	"github.com/converge-dev/converge/engine"
)

// TestReportShowsWaves: the report of an ordered set names each object's wave, in the text
// line and in the structured formats; an unordered set's report is unchanged.
func TestReportShowsWaves(t *testing.T) {
	cm := func(name, wave string) engine.Change {
		id := object.ObjMetadata{Namespace: "apps", Name: name, GroupKind: schema.GroupKind{Kind: "ConfigMap"}}
		return engine.Change{ID: id.String(), Object: id, Action: engine.ActionCreated, Wave: wave}
	}
	r := newReport("main@sha1:1", true, &engine.Result{Changes: []engine.Change{cm("a", "-1"), cm("b", "0, step 2"), cm("c", "")}}, nil)
	text := r.text()
	for _, want := range []string{"ConfigMap/apps/a created (dry run) in wave -1\n", "ConfigMap/apps/b created (dry run) in wave 0, step 2\n",
		"ConfigMap/apps/c created (dry run)\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("text report\n%s\nwant a line %q", text, want)
		}
	}
	var b bytes.Buffer
	if err := r.write(&b, "json"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"wave": "-1"`) || strings.Count(b.String(), `"wave"`) != 2 {
		t.Errorf("json report names the waves of a and b only:\n%s", b.String())
	}
}
