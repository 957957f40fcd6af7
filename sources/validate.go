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
		if s, ok := md["name"].(string); !ok || s == "" {
			errs = append(errs, errors.New("missing metadata.name"))
		}
		if ns, ok := md["namespace"]; ok {
			if _, ok := ns.(string); !ok {
				errs = append(errs, errors.New("metadata.namespace is not a string"))
			}
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

// objectID formats "Kind/namespace/name", leaving out what is missing.
func objectID(u *unstructured.Unstructured) string {
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
		return kind + "/" + name
	}
	return kind + "/" + ns + "/" + name
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
// both copies come from, and more than max objects in all (rel names the rendered path).
func validateSet(results [][]decoded, rel string, max int) ([]*unstructured.Unstructured, error) {
	n := 0
	for _, r := range results {
		n += len(r)
	}
	if n > max {
		return nil, tooManyObjects(rel, n, max)
	}
	seen := make(map[objectKey]location, n)
	out := make([]*unstructured.Unstructured, 0, n)
	var errs []error
	for _, r := range results {
		for _, d := range r {
			k := keyOf(d.obj)
			if first, dup := seen[k]; dup {
				errs = append(errs, d.loc.errorf(objectID(d.obj), "duplicate object, also defined in %s", describe(first)))
				continue
			}
			seen[k] = d.loc
			out = append(out, d.obj)
		}
	}
	if err := joinErrors(errs); err != nil {
		return nil, err
	}
	return out, nil
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
