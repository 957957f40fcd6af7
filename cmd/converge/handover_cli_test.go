package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/cmd/converge/internal/scheme"
	"github.com/converge-dev/converge/e2e/cluster"
)

// TestApplyCLITakeOverManagers: converge apply --adopt takes over the fields of the
// managers --take-over-managers lists (by default Flux's, Argo CD's and kubectl's), so a
// data key the source does not declare is removed from a ConfigMap kustomize-controller
// applied; with --take-over-managers="" kustomize-controller keeps it.
//
// Without it: the flag did not exist, and kustomize-controller's key always stayed.
func TestApplyCLITakeOverManagers(t *testing.T) {
	cluster.Require(t, env)
	ns := env.Namespace(t)
	c, err := client.New(env.Config, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		args      []string
		wantExtra bool
	}{
		{"default", nil, false},
		{"none", []string{"--take-over-managers="}, true},
		{"prefix", []string{"--take-over-managers=kustomize-*"}, false},
	} {
		flux := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": tc.name, "namespace": ns}, "data": map[string]any{"k": "v", "extra": "x"}}}
		if err := c.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(flux), client.FieldOwner("kustomize-controller")); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(t.TempDir(), tc.name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		writeSet(t, dir, ns, map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: " + tc.name + "}\ndata: {k: v}\n"})
		args := append([]string{"apply", dir, "-n", ns, "--adopt", "--inventory", ns + "/inv-" + tc.name}, tc.args...)
		if out, code := cli(t, args...); code != 0 {
			t.Fatalf("%s: exit code %d; output:\n%s", tc.name, code, out)
		}
		cm := &corev1.ConfigMap{}
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: tc.name}, cm); err != nil {
			t.Fatal(err)
		}
		if _, got := cm.Data["extra"]; got != tc.wantExtra {
			t.Errorf("%s: data %v, want extra kept: %v", tc.name, cm.Data, tc.wantExtra)
		}
	}
}
