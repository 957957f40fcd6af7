package engine

import (
	"strings"
	"testing"
)

func TestUnifiedDiffMasksSecrets(t *testing.T) {
	live := obj("v1", "Secret", "ns", "s", map[string]any{"data": map[string]any{"same": "c2FtZQ==", "pw": "b2xk"}})
	dry := obj("v1", "Secret", "ns", "s", map[string]any{"data": map[string]any{"same": "c2FtZQ==", "pw": "bmV3", "added": "eA=="}})
	d, err := unifiedDiff("ns_s__Secret", live, dry)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"c2FtZQ==", "b2xk", "bmV3", "eA=="} {
		if strings.Contains(d, secret) {
			t.Errorf("diff shows secret value %q:\n%s", secret, d)
		}
	}
	for _, want := range []string{"-  pw: '*** (before)'", "+  pw: '*** (after)'", "+  added: '***'"} {
		if !strings.Contains(d, want) {
			t.Errorf("diff lacks %q:\n%s", want, d)
		}
	}
	created, err := unifiedDiff("ns_s__Secret", nil, dry)
	if err != nil || strings.Contains(created, "bmV3") || !strings.Contains(created, "+  pw: '***'") {
		t.Errorf("diff of a new Secret = %v:\n%s", err, created)
	}
}
