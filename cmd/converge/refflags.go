package main

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/spf13/cobra"

	"github.com/converge-dev/converge/sources/git"
)

// refFlags are the git-ref flags `build`, `apply` and `run`'s quick start share, with one
// meaning: one --ref (a branch, a 40-hex commit, or "branch:", "tag:", "semver:",
// "commit:" and a value), or the --ref-branch, --ref-tag, --ref-semver, --ref-commit form.
type refFlags struct {
	ref, branch, tag, semver, commit string
}

// bind registers the flags on cmd; prefix starts each help text ("quick start: ").
func (r *refFlags) bind(cmd *cobra.Command, prefix string) {
	fl := cmd.Flags()
	fl.StringVar(&r.ref, "ref", "", prefix+`ref: a branch, a 40-hex commit, or "branch:NAME", "tag:NAME", "semver:RANGE", "commit:SHA"`)
	fl.StringVar(&r.branch, "ref-branch", "", prefix+"branch to fetch")
	fl.StringVar(&r.tag, "ref-tag", "", prefix+"tag to fetch")
	fl.StringVar(&r.semver, "ref-semver", "", prefix+"semver range over tags; the highest match is fetched")
	fl.StringVar(&r.commit, "ref-commit", "", prefix+"exact commit SHA to fetch")
	for _, other := range []string{"ref-branch", "ref-tag", "ref-semver", "ref-commit"} {
		cmd.MarkFlagsMutuallyExclusive("ref", other)
	}
}

// resolve returns the ref the flags name; the zero Ref when none is set.
func (r *refFlags) resolve() (git.Ref, error) {
	if r.ref == "" {
		return git.Ref{Branch: r.branch, Tag: r.tag, SemVer: r.semver, Commit: r.commit}, nil
	}
	return parseRef(r.ref)
}

var fullSHA = regexp.MustCompile(`^[0-9a-f]{40}$`)

// parseRef reads the single --ref flag.
func parseRef(s string) (git.Ref, error) {
	kind, value, found := strings.Cut(s, ":")
	switch {
	case s == "":
		return git.Ref{}, nil
	case !found && fullSHA.MatchString(s):
		return git.Ref{Commit: s}, nil
	case !found:
		return git.Ref{Branch: s}, nil
	case kind == "branch":
		return git.Ref{Branch: value}, nil
	case kind == "tag":
		return git.Ref{Tag: value}, nil
	case kind == "semver":
		return git.Ref{SemVer: value}, nil
	case kind == "commit":
		return git.Ref{Commit: value}, nil
	}
	return git.Ref{}, fmt.Errorf("--ref %q: want branch:, tag:, semver: or commit: before the colon", s)
}
