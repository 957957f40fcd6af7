package main

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestLeafFields checks the fields trace lists per field manager: FieldsV1 paths flattened,
// keyed list items in brackets, the "." marks of a set left out.
func TestLeafFields(t *testing.T) {
	for _, tc := range []struct {
		name, fields string
		want         []string
	}{
		{"data", `{"f:data":{".":{},"f:version":{},"f:k":{}}}`, []string{"data.k", "data.version"}},
		{"annotation", `{"f:metadata":{"f:annotations":{"f:config.k8s.io/owning-inventory":{}}}}`,
			[]string{"metadata.annotations.config.k8s.io/owning-inventory"}},
		{"keyed list", `{"f:spec":{"f:containers":{"k:{\"name\":\"web\"}":{".":{},"f:image":{}}}}}`,
			[]string{`spec.containers[{"name":"web"}].image`}},
		{"empty", `{}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tree map[string]any
			if err := json.Unmarshal([]byte(tc.fields), &tree); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, leafFields("", tree)); diff != "" {
				t.Errorf("leafFields(%s) (-want +got):\n%s", tc.fields, diff)
			}
		})
	}
}
