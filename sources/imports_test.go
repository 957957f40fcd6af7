package sources

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImports enforces the package boundary (see e2e/layout_test.go): sources never talks to a
// cluster and knows nothing of the engine, the inventory or the Sync status.
func TestImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	forbidden := []string{
		"k8s.io/client-go/",
		"sigs.k8s.io/controller-runtime",
		"github.com/fluxcd/pkg/ssa",
		"github.com/converge-dev/converge/engine",
		"github.com/converge-dev/converge/inventory",
		"github.com/converge-dev/converge/status",
		"github.com/converge-dev/converge/cmd",
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if strings.HasPrefix(dep, f) {
				t.Errorf("sources depends on %s", dep)
			}
		}
	}
}
