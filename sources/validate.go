package sources

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// checkObject checks the fields that identify an object. It does not know schemas: the API
// server validates the rest during a dry-run or apply.
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
	switch md := u.Object["metadata"].(type) {
	case map[string]any:
		if err := checkString(md, "name", true); err != nil {
			errs = append(errs, err)
		}
		if err := checkString(md, "namespace", false); err != nil {
			errs = append(errs, err)
		}
	case nil:
		errs = append(errs, errors.New("missing metadata.name"))
	default:
		errs = append(errs, errors.New("metadata is not a mapping"))
	}
	if len(errs) == 0 {
		return nil
	}
	msgs := make([]string, len(errs))
	for i, err := range errs {
		msgs[i] = err.Error()
	}
	return errors.New(strings.Join(msgs, ", "))
}

// checkString checks that metadata.<field> is a non-empty string (or absent when not
// required). A YAML 1.1 reader turns unquoted y, yes, on, no, off, true and false into
// booleans, and digits into numbers: the message says so, since the file shows a name.
func checkString(md map[string]any, field string, required bool) error {
	v, ok := md[field]
	switch x := v.(type) {
	case string:
		if x != "" || !required {
			return nil
		}
	case nil:
		if !ok && !required {
			return nil
		}
	case bool:
		return fmt.Errorf("metadata.%s is the boolean %t, not a string: YAML reads unquoted y, yes, on, n, no, off as booleans; quote the value", field, x)
	case int64, float64:
		return fmt.Errorf("metadata.%s is the number %v, not a string: quote the value", field, x)
	default:
		return fmt.Errorf("metadata.%s is not a string", field)
	}
	return fmt.Errorf("missing metadata.%s", field)
}

// ObjectID formats "Kind namespace/name" ("Kind name" without a namespace, as kubectl
// names objects), leaving out what is missing.
func ObjectID(u *unstructured.Unstructured) string {
	kind, _ := u.Object["kind"].(string)
	if kind == "" {
		kind = "<no kind>"
	}
	md, _ := u.Object["metadata"].(map[string]any)
	name, _ := md["name"].(string)
	ns, _ := md["namespace"].(string)
	switch {
	case name == "":
		return kind
	case ns == "":
		return kind + " " + name
	}
	return kind + " " + ns + "/" + name
}

// objectKey identifies an object for duplicate detection: group, kind, namespace, name.
// The version is left out: two versions of one object are still one object.
type objectKey struct {
	group, kind, namespace, name string
}

func keyOf(u *unstructured.Unstructured) objectKey {
	gvk := u.GroupVersionKind()
	return objectKey{group: gvk.Group, kind: gvk.Kind, namespace: u.GetNamespace(), name: u.GetName()}
}

// validateSet concatenates per-unit results and refuses duplicate objects, naming where
// both copies come from. It returns each object's origin (describe of its location) too.
// The number of objects was bounded while decoding (budget.decoded).
func validateSet(results [][]decoded) ([]*unstructured.Unstructured, []string, [][]byte, error) {
	n := 0
	for _, r := range results {
		n += len(r)
	}
	seen := make(map[objectKey]location, n)
	out := make([]*unstructured.Unstructured, 0, n)
	origins := make([]string, 0, n)
	var ordered [][]byte // nil unless an object has SOPS metadata
	var errs []error
	for _, r := range results {
		for _, d := range r {
			k := keyOf(d.obj)
			if first, dup := seen[k]; dup {
				errs = append(errs, d.loc.errorf(ObjectID(d.obj), "duplicate object, also defined in %s", describe(first)))
				continue
			}
			seen[k] = d.loc
			out = append(out, d.obj)
			origins = append(origins, describe(d.loc))
			if d.ordered != nil {
				if ordered == nil {
					ordered = make([][]byte, n)
				}
				ordered[len(out)-1] = d.ordered
			}
		}
	}
	if err := joinErrors(errs); err != nil {
		return nil, nil, nil, err
	}
	if ordered != nil {
		ordered = ordered[:len(out)]
	}
	return out, origins, ordered, nil
}

// describe formats a location like InputError does, without the cause.
func describe(l location) string {
	s := l.file
	if l.line > 0 {
		s += fmt.Sprintf(":%d", l.line)
	}
	if l.doc > 0 {
		s += fmt.Sprintf(" (document %d of %d)", l.doc, l.docs)
	}
	return s
}
