package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// The daemon mode's git repository: the Widget CRD in baseFolder, owned by its own Sync and
// applied before anything is timed, and one folder per tenant Sync under syncsFolder. Each
// tenant folder holds its own Namespace and the leaves in it, so the tenant Syncs own
// disjoint objects. The single Sync renders syncsFolder itself (plain folders are decoded
// recursively), so both scenarios apply exactly the same objects from the same files.
const (
	baseFolder  = "base"
	syncsFolder = "syncs"
)

// daemonWorkload is the generated workload of the daemon mode, split by Sync.
type daemonWorkload struct {
	// Base is what the base Sync owns: the Widget CRD.
	Base []*unstructured.Unstructured
	// Tenants are the objects of each tenant Sync: its Namespace first, then its leaves.
	Tenants [][]*unstructured.Unstructured
}

// tenantName is the name of the t-th of n tenants: its folder, its Namespace (with
// nsPrefix) and its Sync. The number is zero-padded so that folders sort by number.
func tenantName(t, n int) string {
	width := max(len(strconv.Itoa(n-1)), 2)
	return fmt.Sprintf("s%0*d", width, t)
}

// tenantNamespace is the Namespace of the t-th of n tenants.
func tenantNamespace(t, n int) string { return nsPrefix + tenantName(t, n) }

// minDaemonObjects is the smallest workload with at least one leaf per tenant.
func minDaemonObjects(tenants int) int { return 1 + 2*tenants }

// daemonWorkloadOptions shape the generated daemon workload.
type daemonWorkloadOptions struct {
	// Parity: every leaf carries an annotation whose value names the -parity variables, so
	// that substitution has work in every object.
	Parity bool
	// Mix is the kinds of the leaves (-mix); nil is the bench's usual mix (kindPattern).
	Mix kindMix
}

// generateDaemon returns a deterministic workload of n objects in total for tenants Syncs:
// the CRD, one Namespace per tenant, and n − 1 − tenants leaves of o.Mix, split into
// tenants contiguous blocks whose sizes differ by at most one. A contiguous block of the
// leaf sequence carries the kind mix of the whole (the mix repeats every few leaves), which
// a split by leaf index modulo tenants would not.
func generateDaemon(n, tenants int, o daemonWorkloadOptions) (daemonWorkload, error) {
	mix := o.Mix
	if mix == nil {
		mix = kindPattern[:]
	}
	if tenants < 1 || n < minDaemonObjects(tenants) {
		return daemonWorkload{}, fmt.Errorf("%d objects for %d Syncs: need at least %d (the CRD, a Namespace and a leaf per Sync)",
			n, tenants, minDaemonObjects(tenants))
	}
	leaves := n - 1 - tenants
	w := daemonWorkload{Base: []*unstructured.Unstructured{widgetCRD()}, Tenants: make([][]*unstructured.Unstructured, tenants)}
	for t := range tenants {
		ns := tenantNamespace(t, tenants)
		from, to := t*leaves/tenants, (t+1)*leaves/tenants
		objs := make([]*unstructured.Unstructured, 0, 1+to-from)
		objs = append(objs, obj("v1", "Namespace", "", ns, nil))
		for i := from; i < to; i++ {
			u := leafOf(mix.kindOf(i), i)
			u.SetNamespace(ns)
			if o.Parity {
				u.SetAnnotations(map[string]string{"bench.converge.dev/placement": "${" + parityTierVar + "}-${" + parityRegionVar + "}"})
			}
			objs = append(objs, u)
		}
		w.Tenants[t] = objs
	}
	return w, nil
}

// tenantObjects is the number of objects of all tenant Syncs together: the whole workload
// but the CRD.
func (w daemonWorkload) tenantObjects() int {
	n := 0
	for _, objs := range w.Tenants {
		n += len(objs)
	}
	return n
}

// tenantPath is the git path of the t-th tenant Sync.
func (w daemonWorkload) tenantPath(t int) string {
	return syncsFolder + "/" + tenantName(t, len(w.Tenants))
}

// write writes the workload under dir: the base in baseFolder, each tenant in its folder
// under syncsFolder, perFile objects per file.
func (w daemonWorkload) write(dir string) error {
	if err := writeObjects(filepath.Join(dir, baseFolder), w.Base); err != nil {
		return err
	}
	for t, objs := range w.Tenants {
		if err := writeObjects(filepath.Join(dir, filepath.FromSlash(w.tenantPath(t))), objs); err != nil {
			return err
		}
	}
	return nil
}

// writeObjects writes objs as multi-document YAML files of perFile objects into folder.
func writeObjects(folder string, objs []*unstructured.Unstructured) error {
	if err := os.MkdirAll(folder, 0o755); err != nil {
		return err
	}
	for start := 0; start < len(objs); start += perFile {
		var b strings.Builder
		for _, u := range objs[start:min(start+perFile, len(objs))] {
			y, err := yaml.Marshal(u.Object)
			if err != nil {
				return fmt.Errorf("%s: %w", keyOf(u), err)
			}
			b.WriteString("---\n")
			b.Write(y)
		}
		name := filepath.Join(folder, fmt.Sprintf("objects-%05d.yaml", start/perFile))
		if err := os.WriteFile(name, []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	return nil
}
