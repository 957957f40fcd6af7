package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// TestMigrateGitRef: a GitRepository's spec.ref becomes the one ref a Sync takes, in Flux's
// order (commit over name over semver over tag over branch); a ref a Sync cannot follow is
// listed as not translated.
func TestMigrateGitRef(t *testing.T) {
	sha := "0123456789abcdef0123456789abcdef01234567"
	for _, tc := range []struct {
		name  string
		ref   map[string]any
		want  v1alpha1.GitRef
		field string // not translated, "" for none
	}{
		{"branch", map[string]any{"branch": "dev"}, v1alpha1.GitRef{Branch: "dev"}, ""},
		{"tag over branch", map[string]any{"branch": "dev", "tag": "v1"}, v1alpha1.GitRef{Tag: "v1"}, ""},
		{"semver over tag", map[string]any{"tag": "v1", "semver": ">=1.0.0"}, v1alpha1.GitRef{SemVer: ">=1.0.0"}, ""},
		{"commit over branch", map[string]any{"branch": "main", "commit": sha}, v1alpha1.GitRef{Commit: sha}, ""},
		{"name of a branch", map[string]any{"name": "refs/heads/release"}, v1alpha1.GitRef{Branch: "release"}, ""},
		{"name of a tag", map[string]any{"name": "refs/tags/v2.0.0"}, v1alpha1.GitRef{Tag: "v2.0.0"}, ""},
		{"name of a pull request", map[string]any{"name": "refs/pull/7/head"}, v1alpha1.GitRef{}, "spec.ref.name"},
		{"short commit", map[string]any{"commit": "0123abc"}, v1alpha1.GitRef{}, "spec.ref.commit"},
		{"semver filter", map[string]any{"semver": "1.x", "semverFilter": ".*-rc.*"}, v1alpha1.GitRef{SemVer: "1.x"}, "spec.ref.semverFilter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &specReader{name: "GitRepository ns/repo"}
			got := gitRef(r, tc.ref)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ref (-want +got):\n%s", diff)
			}
			var fields []string
			for _, u := range r.skip {
				fields = append(fields, u.Field)
			}
			var want []string
			if tc.field != "" {
				want = []string{tc.field}
			}
			if diff := cmp.Diff(want, fields); diff != "" {
				t.Errorf("not translated (-want +got):\n%s", diff)
			}
		})
	}
}

// TestMigrateArgoRevision: a targetRevision becomes a commit, a tag or a branch; every guess
// (HEAD as main, a version as a tag, a name as a branch) comes with a warning.
func TestMigrateArgoRevision(t *testing.T) {
	sha := "0123456789abcdef0123456789abcdef01234567"
	for _, tc := range []struct {
		rev  string
		want v1alpha1.GitRef
		warn bool
	}{
		{"", v1alpha1.GitRef{Branch: "main"}, true},
		{"HEAD", v1alpha1.GitRef{Branch: "main"}, true},
		{sha, v1alpha1.GitRef{Commit: sha}, false},
		{"refs/tags/v1.0.0", v1alpha1.GitRef{Tag: "v1.0.0"}, false},
		{"refs/heads/prod", v1alpha1.GitRef{Branch: "prod"}, false},
		{"v1.2.0", v1alpha1.GitRef{Tag: "v1.2.0"}, true},
		{"staging", v1alpha1.GitRef{Branch: "staging"}, true},
	} {
		m := &migration{From: "Application argocd/app"}
		got := argoRevision(m, tc.rev)
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%q (-want +got):\n%s", tc.rev, diff)
		}
		if (len(m.Warnings) > 0) != tc.warn {
			t.Errorf("%q: warnings %q, want some: %v", tc.rev, m.Warnings, tc.warn)
		}
	}
}

// TestMigrateSourceInAnotherNamespace: a Kustomization whose GitRepository is in another
// namespace translates, but the Secrets the source names must be copied into the Sync's
// namespace: each is listed as not translated, with the namespaces.
func TestMigrateSourceInAnotherNamespace(t *testing.T) {
	ks := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
		"metadata": map[string]any{"name": "app", "namespace": "apps"},
		"spec": map[string]any{"sourceRef": map[string]any{"kind": "GitRepository", "name": "repo", "namespace": "flux-system"},
			"interval": "5m", "prune": true},
	}}
	src := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
		"metadata": map[string]any{"name": "repo", "namespace": "flux-system"},
		"spec":     map[string]any{"url": "ssh://git@example.com/org/apps.git", "secretRef": map[string]any{"name": "ssh-key"}},
	}}
	m, err := translateKustomization(ks, src)
	if err != nil {
		t.Fatal(err)
	}
	if m.Sync == nil || m.Sync.Spec.Source.Git.SecretRef.Name != "ssh-key" || m.Sync.Namespace != "apps" {
		t.Fatalf("Sync: %+v", m.Sync)
	}
	want := []untranslated{{Object: "GitRepository flux-system/repo", Field: "spec.secretRef", Value: "ssh-key",
		Reason: "the Secret is in namespace flux-system and a Sync reads Secrets in its own namespace apps: copy it there"}}
	if diff := cmp.Diff(want, m.NotTranslated); diff != "" {
		t.Errorf("not translated (-want +got):\n%s", diff)
	}
}
