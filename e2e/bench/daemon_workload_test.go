package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/converge-dev/converge/sources"
)

func TestGenerateDaemonSplit(t *testing.T) {
	for _, tc := range []struct {
		name      string
		n         int
		tenants   int
		wantSizes map[int]int // objects per tenant Sync (its Namespace included) → how many tenants
	}{
		{name: "10,000 objects, 100 Syncs", n: 10000, tenants: 100, wantSizes: map[int]int{99: 1, 100: 99}},
		{name: "1,000 objects, 100 Syncs", n: 1000, tenants: 100, wantSizes: map[int]int{9: 1, 10: 99}},
		{name: "smallest", n: 7, tenants: 3, wantSizes: map[int]int{2: 3}},
		{name: "one Sync", n: 50, tenants: 1, wantSizes: map[int]int{49: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := generateDaemon(tc.n, tc.tenants, daemonWorkloadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(w.Base) != 1 || w.Base[0].GetKind() != "CustomResourceDefinition" {
				t.Errorf("base is %d objects, want the CRD alone", len(w.Base))
			}
			if got := len(w.Base) + w.tenantObjects(); got != tc.n {
				t.Errorf("%d objects in total, want %d", got, tc.n)
			}
			sizes := map[int]int{}
			seen := map[string]int{}
			for i, objs := range w.Tenants {
				sizes[len(objs)]++
				ns := tenantNamespace(i, tc.tenants)
				if objs[0].GetKind() != "Namespace" || objs[0].GetName() != ns {
					t.Errorf("tenant %d starts with %s, want its Namespace %s", i, keyOf(objs[0]), ns)
				}
				for _, u := range objs[1:] {
					if u.GetNamespace() != ns {
						t.Errorf("tenant %d holds %s, outside its namespace %s", i, keyOf(u), ns)
					}
				}
				for _, u := range objs {
					if j, dup := seen[keyOf(u)]; dup {
						t.Errorf("%s is in tenants %d and %d", keyOf(u), j, i)
					}
					seen[keyOf(u)] = i
				}
			}
			if diff := cmp.Diff(tc.wantSizes, sizes); diff != "" {
				t.Errorf("tenant sizes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestGenerateDaemonKindMix(t *testing.T) {
	w, err := generateDaemon(10000, 100, daemonWorkloadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, objs := range w.Tenants {
		kinds := map[string]int{}
		for _, u := range objs {
			kinds[u.GetKind()]++
		}
		// 98 or 99 leaves: about 30% ConfigMaps, 20% each Secrets, Services, Deployments, 10% Widgets.
		for kind, low := range map[string]int{"ConfigMap": 28, "Secret": 18, "Service": 18, "Deployment": 18, "Widget": 8} {
			if kinds[kind] < low {
				t.Errorf("tenant %d has %d %ss, want at least %d (kinds %v)", i, kinds[kind], kind, low, kinds)
			}
		}
	}
}

func TestGenerateDaemonTooSmall(t *testing.T) {
	if _, err := generateDaemon(200, 100, daemonWorkloadOptions{}); err == nil {
		t.Error("generateDaemon(200, 100, daemonWorkloadOptions{}) succeeded; every Sync needs a Namespace and a leaf")
	}
}

func TestDaemonWorkloadFolders(t *testing.T) {
	const n, tenants = 400, 12
	w, err := generateDaemon(n, tenants, daemonWorkloadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := w.write(dir); err != nil {
		t.Fatal(err)
	}
	keys := func(path string) []string {
		t.Helper()
		objs, err := sources.Render(context.Background(), dir, path, sources.DefaultRenderOptions())
		if err != nil {
			t.Fatal(err)
		}
		out := make([]string, len(objs))
		for i, u := range objs {
			out[i] = keyOf(u)
		}
		return out
	}
	if diff := cmp.Diff([]string{"CustomResourceDefinition//" + crdName}, keys(baseFolder)); diff != "" {
		t.Errorf("base folder (-want +got):\n%s", diff)
	}
	var union []string
	for i := range tenants {
		got := keys(w.tenantPath(i))
		var want []string
		for _, u := range w.Tenants[i] {
			want = append(want, keyOf(u))
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("folder %s (-want +got):\n%s", w.tenantPath(i), diff)
		}
		union = append(union, want...)
	}
	// The single Sync renders the parent folder: every tenant's objects, in folder order.
	if diff := cmp.Diff(union, keys(syncsFolder)); diff != "" {
		t.Errorf("folder %s is not the union of the tenant folders (-want +got):\n%s", syncsFolder, diff)
	}
	if got, want := w.tenantPath(tenants-1), fmt.Sprintf("%s/s%02d", syncsFolder, tenants-1); got != want {
		t.Errorf("tenantPath = %q, want %q", got, want)
	}
}

// TestGenerateDaemonParity: with -parity every leaf names both variables (so substitution
// has work in every object) and a Namespace names none.
func TestGenerateDaemonParity(t *testing.T) {
	w, err := generateDaemon(400, 4, daemonWorkloadOptions{Parity: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, objs := range w.Tenants {
		for i, u := range objs {
			v := u.GetAnnotations()["bench.converge.dev/placement"]
			leafHas := strings.Contains(v, "${"+parityTierVar+"}") && strings.Contains(v, "${"+parityRegionVar+"}")
			if (i > 0) != leafHas {
				t.Errorf("%s %s: placement %q", u.GetKind(), u.GetName(), v)
			}
		}
	}
}
