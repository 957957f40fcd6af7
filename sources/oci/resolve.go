package oci

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/Masterminds/semver/v3"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/errcode"
)

// resolve returns the tag (empty for a digest reference) and the manifest descriptor a's
// ref names, with one HEAD of the manifest (after a listing of the tags for a semver
// range).
func (f *Fetcher) resolve(ctx context.Context, repo *remote.Repository, a Artifact) (string, ocispec.Descriptor, error) {
	f.count(1, 0)
	tag, reference := a.Ref.Tag, a.Ref.Tag
	switch {
	case a.Ref.Digest != "":
		tag, reference = "", a.Ref.Digest
	case a.Ref.SemVer != "":
		t, err := highestTag(ctx, repo, a)
		if err != nil {
			return "", ocispec.Descriptor{}, err
		}
		tag, reference = t, t
	case tag == "":
		tag, reference = "latest", "latest"
	}
	desc, err := repo.Resolve(ctx, reference)
	if err != nil {
		return "", ocispec.Descriptor{}, classify(a, "resolve", err)
	}
	if a.Ref.Digest != "" && desc.Digest.String() != a.Ref.Digest {
		return "", ocispec.Descriptor{}, fmt.Errorf("%s: %w: the registry answered digest %s", a, ErrDigest, desc.Digest)
	}
	return tag, desc, nil
}

// highestTag lists the repository's tags and returns the highest that parses as a semver
// version and matches a's range.
func highestTag(ctx context.Context, repo *remote.Repository, a Artifact) (string, error) {
	c, err := semver.NewConstraint(a.Ref.SemVer)
	if err != nil {
		return "", fmt.Errorf("%s: %w: semver range %q: %v (fix ref.semver)", a.URL, ErrInvalid, a.Ref.SemVer, err)
	}
	var best *semver.Version
	var bestTag string
	err = repo.Tags(ctx, "", func(tags []string) error {
		for _, t := range tags {
			// helm push tags version 1.2.3+build as 1.2.3_build ("+" is not allowed in a tag).
			v, err := semver.NewVersion(strings.ReplaceAll(t, "_", "+"))
			if err != nil || !c.Check(v) {
				continue
			}
			if best == nil || v.GreaterThan(best) {
				best, bestTag = v, t
			}
		}
		return nil
	})
	if err != nil {
		return "", classify(a, "list tags", err)
	}
	if best == nil {
		return "", fmt.Errorf("%s: %w: no tag matches semver %q (push a matching tag or widen ref.semver)", a, ErrNotFound, a.Ref.SemVer)
	}
	return bestTag, nil
}

// classify wraps a registry error with the artifact, the step and one of ErrNotFound or
// ErrAuth when the registry said so.
func classify(a Artifact, step string, err error) error {
	if IsTerminal(err) {
		return fmt.Errorf("%s: %s: %w", a, step, err)
	}
	var er *errcode.ErrorResponse
	switch {
	case errors.Is(err, errdef.ErrNotFound):
		return fmt.Errorf("%s: %s: %w: %v (push it, or fix the url and ref)", a, step, ErrNotFound, err)
	case errors.Is(err, auth.ErrBasicCredentialNotFound),
		errors.As(err, &er) && (er.StatusCode == http.StatusUnauthorized || er.StatusCode == http.StatusForbidden):
		return fmt.Errorf("%s: %s: %w: %v (check the dockerconfigjson Secret of secretRef)", a, step, ErrAuth, err)
	case errors.As(err, &er) && er.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%s: %s: %w: %v (push it, or fix the url and ref)", a, step, ErrNotFound, err)
	}
	return fmt.Errorf("%s: %s: %w", a, step, err)
}
