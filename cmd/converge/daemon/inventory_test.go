package daemon

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// TestInventoryNameIsValid: the inventory ConfigMap of a Sync is named <name>-inventory as
// before when that fits, and is a valid ConfigMap name (DNS-1123 subdomain) for the longest
// Sync names the API allows (253), two long names that differ only at the end getting two
// ConfigMaps. Without it, a name over 230 characters was cut and "…" appended: an invalid name,
// so the Sync never applied (and two such Syncs would have shared one ConfigMap).
func TestInventoryNameIsValid(t *testing.T) {
	ref := func(name string) string {
		return InventoryRef(&v1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}).Name
	}
	if got := ref("app"); got != "app-inventory" {
		t.Errorf("inventory of Sync app: %q, want app-inventory", got)
	}
	if name := strings.Repeat("a", 230); ref(name) != name+"-inventory" {
		t.Errorf("inventory of a 230-character name: %q, want the name and -inventory", ref(name))
	}
	long := strings.Repeat("a", 230) + strings.Repeat("b", 22)
	names := []string{long + "x", long + "y", strings.Repeat("a.", 126) + "a", strings.Repeat("a", 220) + ".b" + strings.Repeat("c", 31),
		strings.Repeat("a", 220) + "-" + strings.Repeat("c", 32)}
	seen := map[string]string{}
	for _, name := range names {
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			t.Fatalf("test name %q is not a valid Sync name: %v", name, errs)
		}
		got := ref(name)
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
			t.Errorf("inventory of a %d-character Sync name: %q is not a valid ConfigMap name: %v", len(name), got, errs)
		}
		if other, ok := seen[got]; ok {
			t.Errorf("Syncs %q and %q share the inventory ConfigMap %q", other, name, got)
		}
		seen[got] = name
	}
}
