package sources

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"helm.sh/helm/v3/pkg/strvals"
)

// The values of a chart (HelmOptions.Values) as a Sync's valuesFrom assembles them: merged
// map by map, a key set at a path, and bounded. These functions only compute; reading the
// ConfigMaps and Secrets is the caller's.

// MergeValues merges src over dst, map by map (any other value of src replaces dst's), as
// Flux merges valuesFrom and values; it returns dst.
func MergeValues(dst, src map[string]any) map[string]any {
	if dst == nil {
		dst = map[string]any{}
	}
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				dst[k] = MergeValues(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
	return dst
}

// maxTargetIndex bounds a list index of a targetPath: strvals allocates every slot up to it.
const maxTargetIndex = 999

// targetIndex finds the list indexes of a targetPath.
var targetIndex = regexp.MustCompile(`\[(\d+)\]`)

// SetTargetPath sets value at path (Helm's --set syntax: a.b[0].c, \. for a dot in a key)
// in vals, typed as Flux's targetPath types it: a value in single or double quotes is the
// string inside them; else true, false, null and integers are typed as --set types them,
// and anything else is a string. Unlike --set, a comma or a brace in the value is not
// syntax: the whole value is set. A list index past 999 is refused.
func SetTargetPath(vals map[string]any, path, value string) error {
	for _, m := range targetIndex.FindAllStringSubmatch(path, -1) {
		if i, err := strconv.Atoi(m[1]); err != nil || i > maxTargetIndex {
			return fmt.Errorf("list index %s: at most %d", m[1], maxTargetIndex)
		}
	}
	typed := TargetValue(value)
	// strvals parses the path; the reader hands it the value as is ("v" is never read).
	return strvals.ParseIntoFile(path+"=v", vals, func([]rune) (any, error) { return typed, nil })
}

// TargetValue types a targetPath value as SetTargetPath sets it.
func TargetValue(v string) any {
	if n := len(v); n >= 2 && (v[0] == '"' && v[n-1] == '"' || v[0] == '\'' && v[n-1] == '\'') {
		return v[1 : n-1]
	}
	switch {
	case strings.EqualFold(v, "true"):
		return true
	case strings.EqualFold(v, "false"):
		return false
	case strings.EqualFold(v, "null"):
		return nil
	case v == "0":
		return int64(0)
	}
	if v != "" && v[0] != '0' {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return n
		}
	}
	return v
}

// ValuesSize estimates the bytes of v as JSON, stopping once past limit.
func ValuesSize(v any, limit int) int {
	n := 0
	var walk func(any)
	walk = func(v any) {
		if n > limit {
			return
		}
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				n += len(k) + 4
				walk(x)
			}
		case []any:
			for _, x := range v {
				n++
				walk(x)
			}
		case string:
			n += len(v) + 2
		default:
			n += 5
		}
	}
	walk(v)
	return n
}

// AppendLeaves appends the scalar values of a values tree, as text, to out, in each form a
// template may print one alone: the forms to redact when the tree came from a Secret.
func AppendLeaves(out []string, v any) []string {
	switch v := v.(type) {
	case map[string]any:
		for _, x := range v {
			out = AppendLeaves(out, x)
		}
	case []any:
		for _, x := range v {
			out = AppendLeaves(out, x)
		}
	case nil:
	case string:
		out = append(out, v)
		if strings.Contains(v, "\n") {
			// toYaml re-indents a multi-line value: each line may be printed alone.
			for _, line := range strings.Split(v, "\n") {
				if line = strings.TrimSpace(line); line != "" {
					out = append(out, line)
				}
			}
		}
	case float64:
		// YAML numbers decode as float64; a template prints them as JSON and toYaml do
		// (12345678), or as int does, not as fmt does (1.2345678e+07).
		out = append(out, fmt.Sprint(v), strconv.FormatFloat(v, 'f', -1, 64))
	default:
		out = append(out, fmt.Sprint(v))
	}
	return out
}
