package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"

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
