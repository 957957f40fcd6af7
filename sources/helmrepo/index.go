package helmrepo

import (
	"bytes"
	"fmt"
	"net/url"
	"strings"

	"github.com/Masterminds/semver/v3"
	"sigs.k8s.io/yaml"
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

// maxFullParse bounds an index parsed whole: decoding YAML takes about twenty times its
// size in memory (measured: 386 MB allocated for a 16 MiB index), so a larger index is
// read only in the layout `helm repo index` writes, where one chart's versions are cut out
// before they are parsed.
const maxFullParse = 8 << 20

// parseIndex reads the versions of chart name in an index.yaml: of the chart's part only
// when the index has the layout helm writes (chartEntries), else of the whole index up to
// maxFullParse.
func parseIndex(repo, name string, data []byte) (*index, error) {
	if part, ok := chartEntries(data, name); ok {
		data = part
	} else if len(data) > maxFullParse {
		return nil, fmt.Errorf("%s: index.yaml: %w: %d bytes not in the layout helm repo index writes; such an index is read up to %d bytes",
			redact(repo), ErrTooLarge, len(data), maxFullParse)
	}
	var idx index
	if err := yaml.Unmarshal(data, &idx); err != nil {
		return nil, fmt.Errorf("%s: index.yaml: %w: %v", redact(repo), ErrInvalid, err)
	}
	if idx.APIVersion == "" {
		return nil, fmt.Errorf("%s: index.yaml: %w: no apiVersion (is this a Helm repository?)", redact(repo), ErrInvalid)
	}
	return &idx, nil
}

// chartEntries returns an index holding only the apiVersion line and the versions of chart
// name, cut from data in the layout `helm repo index` writes (top-level keys at column 0,
// each chart's name at column 2 under "entries:", its versions a list below it), and false
// when data does not have that layout. A chart the index does not list gives an index
// without it.
func chartEntries(data []byte, name string) ([]byte, bool) {
	var out, apiVersion []byte
	inEntries, inChart, sawEntries := false, false, false
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i+1], data[i+1:]
		} else {
			data = nil
		}
		text := strings.TrimRight(string(line), "\r\n")
		switch {
		case strings.TrimSpace(text) == "" || strings.HasPrefix(strings.TrimSpace(text), "#"):
			if inChart {
				out = append(out, line...)
			}
		case text[0] != ' ':
			inEntries, inChart = text == "entries:", false
			sawEntries = sawEntries || inEntries
			if strings.HasPrefix(text, "apiVersion:") {
				apiVersion = append([]byte(nil), line...)
			}
		case !inEntries:
		case strings.HasPrefix(text, "  ") && len(text) > 2 && text[2] != ' ' && text[2] != '-':
			key := strings.TrimSuffix(strings.TrimSpace(text), ":")
			inChart = strings.HasSuffix(text, ":") && strings.Trim(key, `"'`) == name
			if inChart {
				out = append(out, line...)
			}
		case inChart:
			out = append(out, line...)
		}
	}
	if !sawEntries || apiVersion == nil {
		return nil, false
	}
	if len(out) == 0 {
		return append(apiVersion, "entries: {}\n"...), true
	}
	return append(append(apiVersion, "entries:\n"...), out...), true
}

// resolved is a chart version chosen from the index and the absolute URL of its archive.
type resolved struct {
	version string
	url     *url.URL
	digest  string // hex, lower case; "" when the index gives none
}

// resolve picks the highest version of c.Name matching c.Version (empty: the highest
// without a prerelease) and resolves its first URL against the repository's.
func resolve(idx *index, c Chart, base *url.URL) (resolved, error) {
	constraint := c.Version
	if constraint == "" {
		constraint = "*" // no prerelease, as helm's default
	}
	con, err := semver.NewConstraint(constraint)
	if err != nil {
		return resolved{}, fmt.Errorf("%s: %w: version constraint %q: %v", c, ErrInvalid, c.Version, err)
	}
	versions, ok := idx.Entries[c.Name]
	if !ok {
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
