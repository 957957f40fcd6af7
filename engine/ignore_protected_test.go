package engine

import (
	"strings"
	"testing"

	"github.com/converge-dev/converge/inventory"
)

// TestIgnoreRefusesWhatTheEngineOwns: an ignore path that is, contains or lies under the
// object's identity, the owner annotation or the scope label is refused (terminal), naming
// the field: an object applied without its owner annotation would sit in the inventory with
// no owner (I11). Paths beside them stay allowed.
func TestIgnoreRefusesWhatTheEngineOwns(t *testing.T) {
	owner := "/metadata/annotations/" + inventory.PointerToken(OwnerAnnotation)
	for _, p := range []string{"/metadata", "/metadata/annotations", owner, "/kind", "/metadata/name",
		"/metadata/managedFields/0", "/metadata/labels/shard.example~1of"} {
		_, err := newIgnorer(ApplyOptions{Ignore: []IgnoreRule{{Paths: []string{p}}}}, "shard.example/of", true)
		if err == nil || !IsTerminal(err) || !strings.Contains(err.Error(), "never ignored") {
			t.Errorf("path %s: %v, want a terminal refusal", p, err)
		}
	}
	for _, p := range []string{"/spec/replicas", "/metadata/labels/team", "/metadata/annotations/example.com~1x"} {
		if _, err := newIgnorer(ApplyOptions{Ignore: []IgnoreRule{{Paths: []string{p}}}}, "shard.example/of", true); err != nil {
			t.Errorf("path %s: %v, want it allowed", p, err)
		}
	}
}
