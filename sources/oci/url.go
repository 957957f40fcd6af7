package oci

import (
	"fmt"
	"regexp"
	"strings"

	"oras.land/oras-go/v2/registry"
)

// Scheme prefixes an artifact URL.
const Scheme = "oci://"

var digestPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// parse checks a's URL and ref and returns the registry reference of its repository.
func parse(a Artifact) (registry.Reference, error) {
	if !strings.HasPrefix(a.URL, Scheme) {
		return registry.Reference{}, fmt.Errorf("%s: %w: want oci://host[:port]/repository", a.URL, ErrInvalid)
	}
	rest := strings.TrimPrefix(a.URL, Scheme)
	ref, err := registry.ParseReference(rest)
	if err != nil || ref.Reference != "" || ref.Repository == "" {
		return registry.Reference{}, fmt.Errorf("%s: %w: want oci://host[:port]/repository, the tag or digest in ref", a.URL, ErrInvalid)
	}
	set := 0
	for _, f := range []string{a.Ref.Tag, a.Ref.SemVer, a.Ref.Digest} {
		if f != "" {
			set++
		}
	}
	if set > 1 {
		return registry.Reference{}, fmt.Errorf("%s: %w: set one of tag, semver and digest", a.URL, ErrInvalid)
	}
	if a.Ref.Digest != "" && !digestPattern.MatchString(a.Ref.Digest) {
		return registry.Reference{}, fmt.Errorf("%s: %w: digest %q: want sha256:<64 lowercase hex>", a.URL, ErrInvalid, a.Ref.Digest)
	}
	if a.Ref.Tag != "" {
		if err := (registry.Reference{Registry: ref.Registry, Repository: ref.Repository, Reference: a.Ref.Tag}).ValidateReferenceAsTag(); err != nil {
			return registry.Reference{}, fmt.Errorf("%s: %w: tag %q", a.URL, ErrInvalid, a.Ref.Tag)
		}
	}
	switch a.Layer.Operation {
	case "", OperationExtract, OperationCopy:
	default:
		return registry.Reference{}, fmt.Errorf("%s: %w: layer operation %q: want extract or copy", a.URL, ErrInvalid, a.Layer.Operation)
	}
	return ref, nil
}

// ParseURL splits a command-line reference, "oci://host[:port]/repo[:tag|@sha256:hex]",
// into the repository URL and its ref.
func ParseURL(s string) (url string, ref Ref, err error) {
	if !strings.HasPrefix(s, Scheme) {
		return "", Ref{}, fmt.Errorf("%s: %w: want oci://host[:port]/repository[:tag|@digest]", s, ErrInvalid)
	}
	r, err := registry.ParseReference(strings.TrimPrefix(s, Scheme))
	if err != nil {
		return "", Ref{}, fmt.Errorf("%s: %w: %v", s, ErrInvalid, err)
	}
	url = Scheme + r.Registry + "/" + r.Repository
	switch {
	case r.Reference == "":
	case strings.Contains(r.Reference, ":"):
		ref.Digest = r.Reference
	default:
		ref.Tag = r.Reference
	}
	return url, ref, nil
}
