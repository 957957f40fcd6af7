package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// gitRepo makes a git work tree in a temporary folder, ignoring "bin/", with files (slash
// paths to contents) written in it, and returns its path.
func gitRepo(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("git", "init", "-q", dir).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v: %s", err, out)
	}
	files[".gitignore"] = "bin/\n"
	writeTree(t, dir, files)
	return dir
}

func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBuildSkipsGitIgnored: a plain folder holding a git-ignored 20 MB build output builds,
// and that output is not part of the local revision; a tracked edit still is. An ignored
// folder named as PATH is built.
func TestBuildSkipsGitIgnored(t *testing.T) {
	big := strings.Repeat("# generated\n", 20<<20/12)
	repo := gitRepo(t, map[string]string{
		"deploy/cm.yaml":        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
		"deploy/bin/out.yaml":   big,
		"deploy/bin/gen/c.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n",
	})
	deploy := filepath.Join(repo, "deploy")
	out, errOut, code := runOffline("build", deploy)
	if code != 0 || !strings.Contains(out, "name: a") {
		t.Fatalf("exit %d, error %q; want the ConfigMap built, the ignored file not read", code, errOut)
	}
	// A git-ignored folder named as PATH is what the user asked for.
	if out, errOut, code := runOffline("build", filepath.Join(deploy, "bin", "gen")); code != 0 || !strings.Contains(out, "name: c") {
		t.Errorf("build of an ignored folder named as PATH: exit %d, error %q; want it built", code, errOut)
	}

	revision := func() string {
		t.Helper()
		b, err := (&sourceFlags{}).load(t.Context(), []string{deploy})
		if err != nil {
			t.Fatal(err)
		}
		return b.Revision
	}
	before := revision()
	writeTree(t, repo, map[string]string{"deploy/bin/out.yaml": big + "# rebuilt\n"})
	if after := revision(); after != before {
		t.Errorf("revision %s became %s when a git-ignored file changed; want it unchanged", before, after)
	}
	writeTree(t, repo, map[string]string{"deploy/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n"})
	if after := revision(); after == before {
		t.Errorf("revision %s unchanged after a tracked file changed", after)
	}
}

// TestBuildRefusesGitIgnoredReference: a kustomization that references a git-ignored file
// fails naming it, rather than deploying what no commit holds.
func TestBuildRefusesGitIgnoredReference(t *testing.T) {
	repo := gitRepo(t, map[string]string{
		"app/kustomization.yaml": "resources: [cm.yaml, bin/gen.yaml]\n",
		"app/cm.yaml":            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
		"app/bin/gen.yaml":       "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: generated}\n",
	})
	_, errOut, code := runOffline("build", filepath.Join(repo, "app"))
	if code != 2 || !strings.Contains(errOut, `app/kustomization.yaml: resources[1]: "bin/gen.yaml": git-ignored`) {
		t.Errorf("exit %d, error %q; want exit 2 naming the kustomization, the field and the ignored file", code, errOut)
	}
}

// TestBuildRootHint: outside a git work tree the source root is PATH, so an overlay's base
// above it escapes the root; the error says which root that was and that --root widens it.
func TestBuildRootHint(t *testing.T) {
	dir := t.TempDir()
	if workTree(dir) != "" {
		t.Skip("the temporary folder is inside a git work tree")
	}
	writeTree(t, dir, map[string]string{
		"base/kustomization.yaml":          "resources: [cm.yaml]\n",
		"base/cm.yaml":                     "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
		"overlays/prod/kustomization.yaml": "resources: [../../base]\nnamePrefix: prod-\n",
	})
	overlay := filepath.Join(dir, "overlays", "prod")
	_, errOut, code := runOffline("build", overlay)
	if code != 2 || !strings.Contains(errOut, "(the source root is "+overlay+"; widen it with --root)") {
		t.Errorf("exit %d, error %q; want exit 2 naming the source root and --root", code, errOut)
	}
	if out, errOut, code := runOffline("build", "--root", dir, overlay); code != 0 || !strings.Contains(out, "name: prod-a") {
		t.Errorf("with --root: exit %d, error %q; want the overlay built", code, errOut)
	}
}
