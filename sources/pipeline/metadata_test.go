package pipeline

import (
	"testing"

	"github.com/converge-dev/converge/e2e/sopsfixture"
	"github.com/converge-dev/converge/sources/varsubst"
	"github.com/google/go-cmp/cmp"
)

// TestPrepareSetsCommonMetadataLast: common labels and annotations land on every object
// after decryption (the SOPS MAC still verifies) and substitution (a variable in them is
// kept as written, as Flux does), win over the objects' own, and the rendered objects are
// left as they were.
func TestPrepareSetsCommonMetadataLast(t *testing.T) {
	key := sopsfixture.NewKey(t)
	labelled := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: own, namespace: app, labels: {team: own, keep: me}}\n"
	in := bundle(t, plainYAML, labelled, string(sopsfixture.Encrypt(t, []byte(configMapYAML), sopsfixture.DefaultRegex, key.Recipient)))
	calls := 0
	res, err := Prepare(t.Context(), in, Options{
		Decryption: Decryption{Keys: keysOf(t, key.Identity)},
		Substitution: &Substitution{Variables: variables(&calls, nil,
			varsubst.Source{Name: "spec.postBuild.substitute", Values: map[string]string{"tier": "gold", "host": "h"}})},
		Metadata: &Metadata{Labels: map[string]string{"team": "platform"}, Annotations: map[string]string{"note": "${tier}"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range res.Bundle.Objects {
		if o.GetLabels()["team"] != "platform" || o.GetAnnotations()["note"] != "${tier}" {
			t.Errorf("object %d: labels %v annotations %v", i, o.GetLabels(), o.GetAnnotations())
		}
	}
	if got := res.Bundle.Objects[1].GetLabels(); !cmp.Equal(got, map[string]string{"team": "platform", "keep": "me"}) {
		t.Errorf("labels of an object with its own: %v", got)
	}
	if got := value(t, res.Bundle.Objects[2], "url"); got != "https://h/db" {
		t.Errorf("encrypted object: url = %q", got)
	}
	if in.Objects[1].GetLabels()["team"] != "own" || in.Objects[0].GetLabels() != nil {
		t.Error("the rendered objects were modified")
	}
}
