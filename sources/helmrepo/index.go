package helmrepo

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/Masterminds/semver/v3"
)

// index is what Converge reads of an index.yaml: the versions of each chart.
type index struct {
	APIVersion string                    `json:"apiVersion"`
	Entries    map[string][]chartVersion `json:"entries"`
}

// chartVersion is one entry of the index.
type chartVersion struct {
	Version string   `json:"version"`
	URLs    []string `json:"urls"`
	// Digest is the hex SHA-256 of the packaged chart, as `helm repo index` writes it.
	Digest string `json:"digest"`
}

// resolved is a chart version chosen from the index and the absolute URL of its archive.
type resolved struct {
	version string
	url     *url.URL
	digest  string // hex, lower case; "" when the index gives none
}

// resolve picks the highest of the versions of c.Name matching c.Version (empty: the
// highest without a prerelease) and resolves its first URL against the repository's.
func resolve(versions []chartVersion, c Chart, base *url.URL) (resolved, error) {
	constraint := c.Version
	if constraint == "" {
		constraint = "*" // no prerelease, as helm's default
	}
	con, err := semver.NewConstraint(constraint)
	if err != nil {
		return resolved{}, fmt.Errorf("%s: %w: version constraint %q: %v", c, ErrInvalid, c.Version, err)
	}
	if len(versions) == 0 {
		return resolved{}, fmt.Errorf("%s: %w: the index lists no chart %q", c, ErrNotFound, c.Name)
	}
	var best *semver.Version
	var pick chartVersion
	for _, cv := range versions {
		v, err := semver.NewVersion(cv.Version)
		if err != nil || !con.Check(v) {
			continue
		}
		if best == nil || v.GreaterThan(best) {
			best, pick = v, cv
		}
	}
	if best == nil {
		return resolved{}, fmt.Errorf("%s: %w: no version of %d matches %q", c, ErrNotFound, len(versions), constraint)
	}
	if len(pick.URLs) == 0 {
		return resolved{}, fmt.Errorf("%s: index.yaml: %w: version %s lists no URL", c, ErrInvalid, pick.Version)
	}
	ref, err := url.Parse(pick.URLs[0])
	if err != nil {
		return resolved{}, fmt.Errorf("%s: index.yaml: %w: version %s: URL %q: %v", c, ErrInvalid, pick.Version, pick.URLs[0], err)
	}
	u := base.ResolveReference(ref)
	if u.Scheme != "https" && u.Scheme != "http" {
		return resolved{}, fmt.Errorf("%s: index.yaml: %w: version %s: URL %q is not http(s)", c, ErrInvalid, pick.Version, redact(u.String()))
	}
	d := strings.ToLower(strings.TrimPrefix(pick.Digest, "sha256:"))
	if d != "" && !isHex64(d) {
		return resolved{}, fmt.Errorf("%s: index.yaml: %w: version %s: digest %q is not a SHA-256", c, ErrInvalid, pick.Version, pick.Digest)
	}
	return resolved{version: pick.Version, url: u, digest: d}, nil
}

func isHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, r := range s {
		if !strings.ContainsRune("0123456789abcdef", r) {
			return false
		}
	}
	return true
}
