package varsubst

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/fluxcd/pkg/envsubst"
	yamlv2 "go.yaml.in/yaml/v2"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/sources"
)

// Opt-out keys: an object whose label or annotation of either key is DisabledValue is left
// as rendered. Flux's key is honoured so that repositories migrate unchanged.
const (
	FluxDisabledKey = "kustomize.toolkit.fluxcd.io/substitute"
	DisabledKey     = "converge.dev/substitute"
	DisabledValue   = "disabled"
)

// namePattern is Flux's variable name rule.
var namePattern = regexp.MustCompile(`^[_[:alpha:]][_[:alpha:][:digit:]]*$`)

// Source is one set of variables and where it came from.
type Source struct {
	// Name says where the variables come from, for messages: "ConfigMap apps/vars",
	// "spec.postBuild.substitute", "vars.env".
	Name string
	// Values maps variable names to values.
	Values map[string]string
	// Sensitive marks values read from a Secret: the Redactor of the merged Variables hides
	// them.
	Sensitive bool
}

// Variables are merged variable sources. The zero value has no variable: Expand then
// changes nothing, as Flux does when no variable is defined.
type Variables struct {
	values    map[string]string
	sensitive []string
}

// Clean is a value as it is substituted: without newlines, as Flux substitutes it. What
// redacts a value must redact this form.
func Clean(value string) string { return strings.ReplaceAll(value, "\n", "") }

// Merge checks the variable names of srcs and merges them in order, a later source winning
// over an earlier one, as Flux merges substituteFrom entries and then spec.postBuild.substitute.
// Newlines are removed from values, as Flux does, so a value never adds a line to the YAML
// it lands in. A name that is not a valid variable name is an error naming its source.
func Merge(srcs ...Source) (Variables, error) {
	v := Variables{values: map[string]string{}}
	var errs []error
	for _, s := range srcs {
		for _, k := range slices.Sorted(maps.Keys(s.Values)) {
			val := s.Values[k]
			if !namePattern.MatchString(k) {
				errs = append(errs, fmt.Errorf("%s: key %q is not a valid variable name (letters, digits and _, not starting with a digit)", s.Name, k))
				continue
			}
			val = Clean(val)
			v.values[k] = val
			if s.Sensitive {
				v.sensitive = append(v.sensitive, val)
			}
		}
	}
	if err := bounded(errs); err != nil {
		return Variables{}, err
	}
	return v, nil
}

// Len is the number of variables.
func (v Variables) Len() int { return len(v.values) }

// Fingerprint identifies the variables and their values (a SHA-256), so that a caller can
// tell that an Expand of the same objects would give the same result without keeping the
// values.
func (v Variables) Fingerprint() [sha256.Size]byte {
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(v.values)) {
		fmt.Fprintf(h, "%d:%s%d:%s", len(k), k, len(v.values[k]), v.values[k])
	}
	return [sha256.Size]byte(h.Sum(nil))
}

// Redactor hides the values of the Sensitive sources merged into v, including those a
// later source overrode (they were read, so they are kept out of messages too).
func (v Variables) Redactor() *Redactor { return NewRedactor(v.sensitive) }

// Sensitive is the values that came from a Source marked Sensitive, for a caller that
// builds one Redactor over them and values of its own.
func (v Variables) Sensitive() []string { return v.sensitive }

// Options are the settings of one Expand.
type Options struct {
	// Strict makes a variable without a value and without a default an error naming the
	// object and the variable; otherwise it is replaced by "" (Flux's default).
	Strict bool
	// MaxObjectSize bounds one substituted object's text, in bytes, and MaxTotalSize the
	// bytes substitution inserts into all the objects of one Expand: a small object that
	// names a large value many times would otherwise expand without bound. Counted as the
	// values are inserted, so an object past the bound is refused before it is built.
	// Zero: sources.DefaultMaxFileSize and sources.DefaultMaxTotalSize.
	MaxObjectSize, MaxTotalSize int64
}

// DefaultOptions is Flux's default: not strict; and the default size bounds.
func DefaultOptions() Options { return Options{} }

// withDefaults fills the zero size bounds.
func (o Options) withDefaults() Options {
	if o.MaxObjectSize <= 0 {
		o.MaxObjectSize = sources.DefaultMaxFileSize
	}
	if o.MaxTotalSize <= 0 {
		o.MaxTotalSize = sources.DefaultMaxTotalSize
	}
	return o
}

// Expand substitutes vars in the objects of b and returns a new Bundle; b is not modified.
// Objects whose text does not change are shared with b; a changed one is a new object that
// shares with b's every value the substitution left as it was (its maps and lists are its
// own only on the paths to a substituted value), so it must not be modified either, like
// b's. A variable sits in a few fields of an object, and a daemon keeps the result to reuse
// it: a full copy was a second render in memory (23.5 MB live at 10,000 objects, against
// 9.5 MB shared).
// With no variable at all nothing is substituted, as under Flux (defaults such as
// ${var:=x} are then left as written). Failures are *sources.InputError values naming the
// object, where it was rendered from and the variable or the YAML error; they are joined,
// and nothing is returned with them.
func Expand(b *sources.Bundle, vars Variables, opts Options) (*sources.Bundle, error) {
	if b == nil || vars.Len() == 0 {
		return b, nil
	}
	out := *b
	out.Objects = make([]*unstructured.Unstructured, len(b.Objects))
	changed := false
	var errs []error
	opts = opts.withDefaults()
	var inserted int64 // across objects, against opts.MaxTotalSize
	for i, obj := range b.Objects {
		n, err := expandObject(obj, vars, opts, &inserted)
		if err != nil {
			errs = append(errs, inputError(b, i, obj, err))
			continue
		}
		if n == nil {
			out.Objects[i] = obj
			continue
		}
		if err := checkObject(n); err != nil {
			errs = append(errs, inputError(b, i, obj, fmt.Errorf("after substitution: %w", err)))
			continue
		}
		out.Objects[i], changed = n, true
	}
	if err := bounded(errs); err != nil {
		return nil, err
	}
	if !changed {
		return b, nil
	}
	if err := checkDuplicates(&out); err != nil {
		return nil, err
	}
	return &out, nil
}

// expandObject returns the substituted copy of obj, or nil when substitution leaves it as
// it is (disabled, no "$" in it, or the same text).
func expandObject(obj *unstructured.Unstructured, vars Variables, opts Options, inserted *int64) (*unstructured.Unstructured, error) {
	if disabled(obj) || !hasDollar(obj.Object) {
		return nil, nil
	}
	text, err := serialize(obj.Object)
	if err != nil {
		return nil, fmt.Errorf("serialize: %w", err)
	}
	var missing []string
	var over error
	size := int64(len(text))
	got, err := envsubst.Eval(string(text), func(name string) (string, bool) {
		val, ok := vars.values[name]
		if !ok && opts.Strict {
			missing = append(missing, name)
			return "", false
		}
		// Past a bound, nothing more is inserted: the output stays bounded, then refused.
		if size += int64(len(val)); over == nil && size > opts.MaxObjectSize {
			over = fmt.Errorf("substitution makes the object larger than %d bytes (raise the limit with --max-file-size)", opts.MaxObjectSize)
		}
		if *inserted += int64(len(val)); over == nil && *inserted > opts.MaxTotalSize {
			over = fmt.Errorf("substitution inserts more than %d bytes into the render's objects (raise the limit with --max-total-size)", opts.MaxTotalSize)
		}
		if over != nil {
			return "", true
		}
		return val, true
	})
	if over != nil {
		return nil, over
	}
	if err != nil {
		if len(missing) > 0 {
			return nil, fmt.Errorf("variable %q has no value and no default (postBuild.strict)", missing[0])
		}
		return nil, fmt.Errorf("substitution: %w", err)
	}
	if got == string(text) {
		return nil, nil
	}
	js, err := yaml.YAMLToJSON([]byte(got))
	if err != nil {
		return nil, fmt.Errorf("substitution made invalid YAML: %w", err)
	}
	m := map[string]any{}
	if err := utiljson.Unmarshal(js, &m); err != nil {
		return nil, fmt.Errorf("substitution made something other than an object: %w", err)
	}
	// Object by object, so that the copies of unchanged parts are garbage at once rather
	// than a second render held until the last object is done.
	shared(obj.Object, m)
	return &unstructured.Unstructured{Object: m}, nil
}

// shared returns in when out holds the same value (the same JSON, in the same Go types),
// else out with each of its map values and list elements that equals in's at the same
// place replaced by in's. Only out is written to.
func shared(in, out any) (any, bool) {
	switch o := out.(type) {
	case map[string]any:
		m, ok := in.(map[string]any)
		if !ok {
			return out, false
		}
		same := len(m) == len(o)
		for k, ov := range o {
			iv, ok := m[k]
			if !ok {
				same = false
				continue
			}
			v, eq := shared(iv, ov)
			o[k], same = v, same && eq
		}
		if same {
			return in, true
		}
		return out, false
	case []any:
		l, ok := in.([]any)
		if !ok || len(l) != len(o) {
			return out, false
		}
		same := true
		for i := range o {
			v, eq := shared(l[i], o[i])
			o[i], same = v, same && eq
		}
		if same {
			return in, true
		}
		return out, false
	case nil, string, bool, int64, float64, int, int32:
		// Scalars of the same dynamic type compare without panic; other types are unequal.
		if in == out {
			return in, true
		}
	}
	return out, false
}

// serialize is sigs.k8s.io/yaml.Marshal's output (what kubectl and kustomize users see),
// made by go-yaml v2 directly when obj holds no float: yaml.Marshal encodes JSON and parses
// it again with go-yaml v2 before emitting, half the cost of a substitution
// (TestSerializeIsYAMLMarshal pins the equality, BenchmarkExpand the cost). A float takes
// the long way: its JSON form, read as YAML 1.1, is not always the float go-yaml would
// write (1e+06 is read back as 1000000). go-yaml v2 quotes YAML 1.1 booleans (y, n, on,
// off), which YAMLToJSON would otherwise read back as booleans.
func serialize(obj map[string]any) ([]byte, error) {
	if hasFloat(obj) {
		return yaml.Marshal(obj)
	}
	return yamlv2.Marshal(obj)
}

func hasFloat(v any) bool {
	switch x := v.(type) {
	case float64, float32:
		return true
	case map[string]any:
		for _, e := range x {
			if hasFloat(e) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if hasFloat(e) {
				return true
			}
		}
	}
	return false
}

// disabled reports the opt-out label or annotation, under Flux's key or ours.
func disabled(obj *unstructured.Unstructured) bool {
	l, a := obj.GetLabels(), obj.GetAnnotations()
	for _, k := range []string{FluxDisabledKey, DisabledKey} {
		if l[k] == DisabledValue || a[k] == DisabledValue {
			return true
		}
	}
	return false
}

// hasDollar reports whether any key or string value of v holds a "$": envsubst changes
// only such text (${...} references and $$ escapes), so other objects need no work.
func hasDollar(v any) bool {
	switch x := v.(type) {
	case string:
		return strings.Contains(x, "$")
	case map[string]any:
		for k, e := range x {
			if strings.Contains(k, "$") || hasDollar(e) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if hasDollar(e) {
				return true
			}
		}
	}
	return false
}

// checkObject checks that substitution left the fields that identify an object.
func checkObject(u *unstructured.Unstructured) error {
	var errs []error
	if s, ok := u.Object["apiVersion"].(string); !ok || s == "" {
		errs = append(errs, errors.New("missing apiVersion"))
	} else if _, err := schema.ParseGroupVersion(s); err != nil {
		errs = append(errs, fmt.Errorf("invalid apiVersion %q", s))
	}
	if s, ok := u.Object["kind"].(string); !ok || s == "" {
		errs = append(errs, errors.New("missing kind"))
	}
	md, ok := u.Object["metadata"].(map[string]any)
	if name, _ := md["name"].(string); !ok || name == "" {
		errs = append(errs, errors.New("metadata.name is missing or not a string"))
	}
	if ns := md["namespace"]; ns != nil {
		if _, ok := ns.(string); !ok {
			errs = append(errs, errors.New("metadata.namespace is not a string"))
		}
	}
	return errors.Join(errs...)
}

// checkDuplicates refuses two objects that substitution made the same object.
func checkDuplicates(b *sources.Bundle) error {
	type key struct{ group, kind, namespace, name string }
	seen := make(map[key]int, len(b.Objects))
	var errs []error
	for i, o := range b.Objects {
		gvk := o.GroupVersionKind()
		k := key{gvk.Group, gvk.Kind, o.GetNamespace(), o.GetName()}
		if j, dup := seen[k]; dup {
			errs = append(errs, inputError(b, i, o, fmt.Errorf("after substitution: duplicate object, also defined in %s", origin(b, j))))
			continue
		}
		seen[k] = i
	}
	return bounded(errs)
}

// inputError names the object (as rendered, before substitution) and its origin.
func inputError(b *sources.Bundle, i int, obj *unstructured.Unstructured, err error) error {
	return &sources.InputError{File: origin(b, i), Object: sources.ObjectID(obj), Err: err}
}

func origin(b *sources.Bundle, i int) string {
	if i < len(b.Origins) && b.Origins[i] != "" {
		return b.Origins[i]
	}
	return "<unknown origin>"
}

// maxErrors bounds the joined errors, so that a status condition stays readable.
const maxErrors = 10

func bounded(errs []error) error {
	if len(errs) > maxErrors {
		more := len(errs) - maxErrors
		errs = append(errs[:maxErrors:maxErrors], &sources.InputError{File: "...", Err: fmt.Errorf("%d more errors", more)})
	}
	return errors.Join(errs...)
}
