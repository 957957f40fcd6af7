package main

import (
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// untranslated is a field of a Flux or Argo CD object that no Sync field expresses: the
// migration prints it instead of dropping it, and exits 1 unless --allow-partial.
type untranslated struct {
	// Object is Kind namespace/name of the object holding the field.
	Object string `json:"object"`
	// Field is the field's path, such as spec.patches.
	Field string `json:"field"`
	// Value is the field's value, compact JSON cut at 120 characters.
	Value string `json:"value,omitempty"`
	// Reason says why it is not translated and what to do instead.
	Reason string `json:"reason"`
}

// specReader reads the fields of one object's map and collects, per object, what it could
// not translate and the fields that are malformed (a malformed field is an error naming the
// object and the field: no Sync is made from it).
type specReader struct {
	name string // Kind namespace/name
	skip []untranslated
	errs []string
}

func describeObject(u *unstructured.Unstructured) string {
	return u.GetKind() + " " + u.GetNamespace() + "/" + u.GetName()
}

func (r *specReader) malformed(field, want string, v any) {
	r.errs = append(r.errs, fmt.Sprintf("%s: want %s, got %s", field, want, compact(v)))
}

func (r *specReader) err() error {
	if len(r.errs) == 0 {
		return nil
	}
	return fmt.Errorf("%s: %s", r.name, strings.Join(r.errs, "; "))
}

// untranslate records field as not translated, unless its value is empty (no effect).
func (r *specReader) untranslate(field string, v any, reason string) {
	if empty(v) {
		return
	}
	r.skip = append(r.skip, untranslated{Object: r.name, Field: field, Value: compact(v), Reason: reason})
}

// rest records every key of m that is not in known as not translated, in key order.
func (r *specReader) rest(m map[string]any, prefix, reason string, known ...string) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !slices.Contains(known, k) {
			r.untranslate(prefix+"."+k, m[k], reason)
		}
	}
}

func (r *specReader) str(m map[string]any, field, key string) string {
	v, ok := m[key]
	if !ok || v == nil {
		return ""
	}
	s, ok := v.(string)
	if !ok {
		r.malformed(field+"."+key, "a string", v)
	}
	return s
}

func (r *specReader) boolean(m map[string]any, field, key string) bool {
	v, ok := m[key]
	if !ok || v == nil {
		return false
	}
	b, ok := v.(bool)
	if !ok {
		r.malformed(field+"."+key, "true or false", v)
	}
	return b
}

func (r *specReader) object(m map[string]any, field, key string) map[string]any {
	v, ok := m[key]
	if !ok || v == nil {
		return nil
	}
	o, ok := v.(map[string]any)
	if !ok {
		r.malformed(field+"."+key, "an object", v)
	}
	return o
}

// objects reads a list of objects.
func (r *specReader) objects(m map[string]any, field, key string) []map[string]any {
	v, ok := m[key]
	if !ok || v == nil {
		return nil
	}
	l, ok := v.([]any)
	if !ok {
		r.malformed(field+"."+key, "a list", v)
		return nil
	}
	out := make([]map[string]any, 0, len(l))
	for i, e := range l {
		o, ok := e.(map[string]any)
		if !ok {
			r.malformed(fmt.Sprintf("%s.%s[%d]", field, key, i), "an object", e)
			continue
		}
		out = append(out, o)
	}
	return out
}

// duration reads a Go duration ("5m", "1h30m") within [lo, hi]; one outside is not
// translated (the Sync's schema would refuse it), one that does not parse is malformed.
func (r *specReader) duration(m map[string]any, field, key string, lo, hi time.Duration) *metav1.Duration {
	s := r.str(m, field, key)
	if s == "" {
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		r.malformed(field+"."+key, "a duration such as 5m", s)
		return nil
	}
	if d < lo || d > hi {
		r.untranslate(field+"."+key, s, fmt.Sprintf("the Sync's field takes %s to %s", lo, hi))
		return nil
	}
	return &metav1.Duration{Duration: d}
}

// localName reads {name: x} (a LocalObjectReference).
func (r *specReader) localName(m map[string]any, field, key string) string {
	o := r.object(m, field, key)
	if o == nil {
		return ""
	}
	return r.str(o, field+"."+key, "name")
}

// cleanPath is a source path as a Sync writes it: "./deploy/" is "deploy", "" is ".".
func cleanPath(p string) string {
	p = path.Clean("/" + p)
	if p == "/" {
		return "."
	}
	return strings.TrimPrefix(p, "/")
}

var commitSHA1 = regexp.MustCompile(`^[0-9a-f]{40}$`)

func empty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case string:
		return x == ""
	case bool:
		return !x
	case []any:
		return len(x) == 0
	case map[string]any:
		return len(x) == 0
	}
	return false
}

// compact is v as one line of JSON, cut at 120 characters.
func compact(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	if len(b) > 120 {
		return string(b[:117]) + "..."
	}
	return string(b)
}
