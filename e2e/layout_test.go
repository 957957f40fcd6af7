package e2e

import (
	"encoding/json"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/converge-dev/converge"

// rules are the import directions between packages (a package knows only what it needs:
// sources renders without a cluster, the engine knows neither git nor the Sync API, the API
// types import only apimachinery): a package under the key prefix must not directly import
// any of the listed prefixes.
var rules = map[string][]string{
	module + "/sources": {module + "/engine", module + "/inventory", module + "/status", "k8s.io/client-go", "sigs.k8s.io/controller-runtime", "github.com/fluxcd/pkg/ssa",
		// Helm's parts that install, store releases or fetch charts: a chart is rendered only.
		"helm.sh/helm/v3/pkg/action", "helm.sh/helm/v3/pkg/kube", "helm.sh/helm/v3/pkg/storage", "helm.sh/helm/v3/pkg/getter", "helm.sh/helm/v3/pkg/registry"},
	module + "/engine":    {module + "/sources", module + "/status", "github.com/go-git", "sigs.k8s.io/kustomize", "github.com/prometheus"},
	module + "/inventory": {module + "/engine", module + "/sources", module + "/status", "github.com/fluxcd/pkg/ssa", "sigs.k8s.io/cli-utils/pkg/kstatus"},
	module + "/status":    {module + "/engine", module + "/sources", module + "/inventory"},
	// Notification delivery takes and gives plain values: the daemon turns its outcomes into
	// metrics and events.
	module + "/cmd/converge/daemon/notify": {module + "/engine", module + "/inventory", module + "/status", "k8s.io", "sigs.k8s.io", "github.com/prometheus"},
	// The API types are for any program to read Syncs with: apimachinery only.
	module + "/status/v1alpha1": {module + "/status", "k8s.io/client-go", "sigs.k8s.io/controller-runtime"},
	// Sharding knows Leases and Syncs, never what a reconcile does with them.
	binaryPkg + "/daemon/shard": {module + "/sources", module + "/inventory"},
	// The write guard is a transport and nothing else.
	binaryPkg + "/daemon/fence": {module},
	// The webhook receiver reads a Sync and its Secret and patches one annotation: it never
	// renders, applies or keeps an inventory, and metrics are the daemon's.
	binaryPkg + "/daemon/webhook": {module + "/engine", module + "/sources", module + "/inventory", binaryPkg + "/daemon/shard", binaryPkg + "/daemon/notify", "github.com/prometheus"},
	// The HTTP server of the webhook and /metrics knows no Sync, no cluster.
	binaryPkg + "/daemon/httpserve": {module, "k8s.io", "sigs.k8s.io"},
}

// transitive are the rules checked against every dependency, not only the direct imports:
// sources never talks to a cluster, not even through a library it uses.
var transitive = map[string]bool{module + "/sources": true}

// helmTemplate are the Helm packages sources renders charts with. Their engine imports
// client-go for the template function lookup, which reaches a cluster only through an
// engine made with engine.New(restConfig); sources uses the zero Engine (lookup returns
// nothing, as `helm template`) in a render child that refuses every HTTP request, and
// imports no client-go package itself, so it cannot make one. What only these packages
// reach is exempt from the transitive rule; a direct import is not.
var helmTemplate = []string{"helm.sh/helm/v3/pkg/engine", "helm.sh/helm/v3/pkg/chartutil"}

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

// binaryPkg is the converge binary, package main: nothing imports it. Its daemon package is
// imported by it alone (the daemon is run by `converge run`, never by a library), the
// daemon's own packages (shard, fence, notify, webhook, httpserve) by the daemon and each
// other alone; its internal packages hold what its CLI verbs and the daemon share.
const binaryPkg = module + "/cmd/converge"

// cmdImportAllowed reports whether importer may import imp, a package under cmd.
func cmdImportAllowed(importer, imp string) bool {
	switch {
	case imp == binaryPkg+"/daemon":
		return importer == binaryPkg
	case strings.HasPrefix(imp, binaryPkg+"/daemon/"): // its parts: shard, fence, notify, webhook, httpserve
		return importer == binaryPkg+"/daemon" || strings.HasPrefix(importer, binaryPkg+"/daemon/")
	case strings.HasPrefix(imp, binaryPkg+"/internal/"):
		return importer == binaryPkg || strings.HasPrefix(importer, binaryPkg+"/")
	}
	return false
}

// TestImportDirections checks that nothing imports cmd except as cmdImportAllowed says,
// production code never imports e2e, and each package keeps to what it may know.
func TestImportDirections(t *testing.T) {
	out, err := exec.Command("go", "list", "-json", "../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	helmDeps := map[string]bool{}
	out2, err := exec.Command("go", append([]string{"list", "-deps"}, helmTemplate...)...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, d := range strings.Fields(string(out2)) {
		helmDeps[d] = true
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	n := 0
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		n++
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module+"/cmd") && !cmdImportAllowed(p.ImportPath, imp) {
				t.Errorf("%s imports %s: only the binary imports its daemon, only it and its packages its internal ones", p.ImportPath, imp)
			}
			if strings.HasPrefix(imp, module+"/e2e") && !strings.HasPrefix(p.ImportPath, module+"/e2e") {
				t.Errorf("%s imports %s: production code must not import e2e", p.ImportPath, imp)
			}
		}
		for prefix, banned := range rules {
			if p.ImportPath != prefix && !strings.HasPrefix(p.ImportPath, prefix+"/") {
				continue
			}
			deps, how := p.Imports, "imports"
			if transitive[prefix] {
				deps, how = p.Deps, "depends on"
			}
			for _, imp := range deps {
				if how == "depends on" && helmDeps[imp] && !slices.Contains(p.Imports, imp) {
					continue
				}
				for _, b := range banned {
					if imp == b || strings.HasPrefix(imp, b+"/") {
						t.Errorf("%s %s %s, which %s must not know", p.ImportPath, how, imp, prefix)
					}
				}
			}
		}
	}
	if n < 8 {
		t.Fatalf("go list saw %d packages; the test is not looking at the module", n)
	}
}

// TestOnlyTheDecryptionProgramLinksSops: converge (daemon and CLI) links no sops package,
// and the decryption program converge starts links sops and nothing of the render. sops'
// root package imports every cloud KMS client and gRPC, and its stores Google Cloud Storage,
// S3 and gRPC's xDS: 28 MB of code and read-only data resident in the daemon and in each
// render child (docs/benchmarks.md, memory), for age decryption that converge-decrypt does.
func TestOnlyTheDecryptionProgramLinksSops(t *testing.T) {
	deps := func(pkg string) []string {
		t.Helper()
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		return strings.Fields(string(out))
	}
	const sops = "github.com/getsops/"
	binary := deps(binaryPkg)
	if len(binary) < 100 {
		t.Fatalf("go list saw %d dependencies of %s; the test is not looking at the binary", len(binary), binaryPkg)
	}
	for _, d := range binary {
		if strings.HasPrefix(d, sops) {
			t.Errorf("%s links %s: only %s/cmd/converge-decrypt may link sops", binaryPkg, d, module)
		}
	}
	linksSops := false
	for _, d := range deps(module + "/cmd/converge-decrypt") {
		linksSops = linksSops || strings.HasPrefix(d, sops)
		if d == module+"/sources" || d == module+"/sources/sops" {
			t.Errorf("converge-decrypt links %s: it decrypts, and needs nothing of the render", d)
		}
		for _, banned := range []string{"sigs.k8s.io/kustomize/", "helm.sh/helm/", "k8s.io/client-go/", module + "/engine"} {
			if strings.HasPrefix(d, banned) {
				t.Errorf("converge-decrypt links %s: it decrypts, and needs nothing of the render or the cluster", d)
			}
		}
	}
	if !linksSops {
		t.Errorf("converge-decrypt links no sops package: the test is not looking at the decryption program")
	}
}
