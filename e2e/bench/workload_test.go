package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestGenerateCounts(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int
		want map[string]int
	}{
		{name: "1000 objects", n: 1000, want: map[string]int{"Namespace": 10, "CustomResourceDefinition": 1,
			"ConfigMap": 297, "Secret": 198, "Service": 198, "Deployment": 198, "Widget": 98}},
		{name: "smallest", n: 12, want: map[string]int{"Namespace": 10, "CustomResourceDefinition": 1, "ConfigMap": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := generate(tc.n)
			if len(objs) != tc.n {
				t.Fatalf("generate(%d) returned %d objects", tc.n, len(objs))
			}
			got := map[string]int{}
			for _, u := range objs {
				got[u.GetKind()]++
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("objects per kind (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWriteWorkloadDeterministic(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	if err := writeWorkload(a, generate(300)); err != nil {
		t.Fatal(err)
	}
	if err := writeWorkload(b, generate(300)); err != nil {
		t.Fatal(err)
	}
	n := 0
	err := filepath.WalkDir(a, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		rel, _ := filepath.Rel(a, path)
		x, _ := os.ReadFile(path)
		y, err := os.ReadFile(filepath.Join(b, rel))
		if err != nil || !bytes.Equal(x, y) {
			t.Errorf("%s differs between two generations (%v)", rel, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != numNamespaces+1 { // 29 objects per namespace fit one file each, plus cluster/
		t.Errorf("wrote %d files, want %d", n, numNamespaces+1)
	}
}

func TestPick(t *testing.T) {
	objs := generate(1000)
	for _, tc := range []struct {
		salt string
		frac float64
		want int
	}{{"change", 0.01, 10}, {"prune", 0.10, 99}} {
		got := pick(objs, tc.salt, tc.frac)
		if len(got) != tc.want {
			t.Errorf("pick(%q, %v) chose %d objects, want %d", tc.salt, tc.frac, len(got), tc.want)
		}
		if diff := cmp.Diff(got, pick(objs, tc.salt, tc.frac)); diff != "" {
			t.Errorf("pick(%q) is not deterministic:\n%s", tc.salt, diff)
		}
		kinds := map[string]bool{}
		for _, u := range objs {
			if got[keyOf(u)] {
				if !isLeaf(u) {
					t.Errorf("pick(%q) chose %s, which is not a leaf", tc.salt, keyOf(u))
				}
				kinds[u.GetKind()] = true
			}
		}
		if len(kinds) < 3 {
			t.Errorf("pick(%q) chose only kinds %v; want a spread", tc.salt, kinds)
		}
	}
}

func TestWithChangeLeavesInputAlone(t *testing.T) {
	objs := generate(100)
	picked := pick(objs, "change", 0.05)
	changed := withChange(objs, picked, 1)
	for i, u := range objs {
		moved := probe(u) != probe(changed[i])
		if moved != picked[keyOf(u)] {
			t.Errorf("%s: probe moved %v, picked %v", keyOf(u), moved, picked[keyOf(u)])
		}
	}
}
