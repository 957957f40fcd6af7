package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/e2e/registry"
)

// ociRegistry starts a registry behind basic auth and TLS, and writes the Docker config and
// CA files the CLI reads.
func ociRegistry(t *testing.T) (reg *registry.Registry, flags []string) {
	reg = registry.Start(t, registry.Options{Username: "ci", Password: "pw", TLS: true})
	dir := t.TempDir()
	cfg, ca := filepath.Join(dir, "config.json"), filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(cfg, reg.DockerConfig("ci", "pw"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ca, reg.CA, 0o600); err != nil {
		t.Fatal(err)
	}
	return reg, []string{"--docker-config", cfg, "--ca-file", ca, "--git-cache-dir", filepath.Join(dir, "cache")}
}

// TestBuildOCI: `converge build oci://…:tag --path` renders a folder of an artifact read
// with --docker-config and --ca-file, and --ref-semver picks the highest tag; a missing tag
// exits 2 naming the reference.
func TestBuildOCI(t *testing.T) {
	reg, flags := ociRegistry(t)
	reg.PushFiles(t, "apps", "1.0.0", map[string]string{"deploy/a.yaml": strings.Replace(cmA, "VERSION", "1", 1)})
	reg.PushFiles(t, "apps", "1.1.0", map[string]string{"deploy/a.yaml": strings.Replace(cmA, "VERSION", "2", 1)})
	out, errOut, code := runOffline(append([]string{"build", reg.URL("apps") + ":1.0.0", "--path", "deploy"}, flags...)...)
	if code != 0 || !strings.Contains(out, "version: \"1\"") {
		t.Fatalf("build by tag: exit %d, out %q, err %s", code, out, errOut)
	}
	out, errOut, code = runOffline(append([]string{"build", reg.URL("apps"), "--ref-semver", "1.x", "--path", "deploy"}, flags...)...)
	if code != 0 || !strings.Contains(out, "version: \"2\"") {
		t.Fatalf("build by semver: exit %d, out %q, err %s", code, out, errOut)
	}
	_, errOut, code = runOffline(append([]string{"build", reg.URL("apps") + ":9.9.9", "--path", "deploy"}, flags...)...)
	if code != 2 || !strings.Contains(errOut, reg.URL("apps")+":9.9.9") || !strings.Contains(errOut, "not found") {
		t.Errorf("missing tag: exit %d, error %q; want exit 2 naming the reference", code, errOut)
	}
}

// TestApplyCLIOCI: `converge apply oci://…` applies an artifact, a dry-run of the same tag
// finds nothing to do, and one of the next tag reports a change.
func TestApplyCLIOCI(t *testing.T) {
	cluster.Require(t, env)
	ns := env.Namespace(t)
	reg, flags := ociRegistry(t)
	a := func(v string) string { return strings.ReplaceAll(strings.Replace(cmA, "VERSION", v, 1), "NS", ns) }
	reg.PushFiles(t, "apps", "v1", map[string]string{"deploy/a.yaml": a("1")})
	reg.PushFiles(t, "apps", "v2", map[string]string{"deploy/a.yaml": a("2")})
	kube := []string{"-n", ns, "--inventory=" + ns + "/app", "--path", "deploy"}
	for _, step := range []struct {
		ref  string
		args []string
		want int
	}{
		{"v1", nil, 0},
		{"v1", []string{"--dry-run"}, 0},
		{"v2", []string{"--dry-run"}, 1},
	} {
		args := append(append(append([]string{"apply", reg.URL("apps") + ":" + step.ref}, kube...), flags...), step.args...)
		out, code := cli(t, args...)
		if code != step.want {
			t.Fatalf("apply %s %v: exit %d, want %d\n%s", step.ref, step.args, code, step.want, out)
		}
	}
}
