package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjson "sigs.k8s.io/json"

	"github.com/converge-dev/converge/cmd/converge/internal/scheme"
	"github.com/converge-dev/converge/sources"
)

// maxCheckErrors bounds the errors checkOffline reports, so a broken folder stays readable.
const maxCheckErrors = 20

// checkOffline runs, without a cluster, the checks an apply would fail on before the API
// server judges the objects further: an object of a built-in group and version must be of
// a kind it has ("ConfigMpa" is refused, with the kind meant), and must decode strictly into
// its Go type (no unknown field, every value of its type: a label "version: 1.5" is a
// number, not the string the API wants). Kinds of other groups (custom resources) are left
// to the API server. Each error names the object's file and the object.
func checkOffline(b *sources.Bundle) error {
	s := scheme.New()
	var errs []error
	for i, u := range b.Objects {
		if err := checkTyped(s, u); err != nil {
			where := ""
			if i < len(b.Origins) && b.Origins[i] != "" {
				where = b.Origins[i] + ": "
			}
			errs = append(errs, fmt.Errorf("%s%s %s: %w", where, u.GetKind(), objectName(u), err))
			if len(errs) == maxCheckErrors {
				errs = append(errs, fmt.Errorf("(and possibly more; fix these first)"))
				break
			}
		}
	}
	return errors.Join(errs...)
}

func objectName(u *unstructured.Unstructured) string {
	if u.GetNamespace() == "" {
		return u.GetName()
	}
	return u.GetNamespace() + "/" + u.GetName()
}

// checkTyped checks u against the Go type of its kind when s knows its group and version.
func checkTyped(s *runtime.Scheme, u *unstructured.Unstructured) error {
	gvk := u.GroupVersionKind()
	known := s.KnownTypes(gvk.GroupVersion())
	if len(known) == 0 {
		return nil // a custom resource, or a version this binary does not know: the server's to judge
	}
	if _, ok := known[gvk.Kind]; !ok {
		return unknownKind(gvk, known)
	}
	obj, err := s.New(gvk)
	if err != nil {
		return nil
	}
	data, err := json.Marshal(u.Object)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(data, obj, kjson.DisallowUnknownFields, kjson.DisallowDuplicateFields)
	if err != nil {
		return fmt.Errorf("invalid for %s: %s", gvk.GroupVersion(), readableDecodeError(err))
	}
	if len(strict) > 0 {
		msgs := make([]string, len(strict))
		for i, e := range strict {
			msgs[i] = e.Error()
		}
		return fmt.Errorf("invalid for %s: %s", gvk.GroupVersion(), strings.Join(msgs, ", "))
	}
	return nil
}

// unknownKind says that gv has no kind gvk.Kind, naming the nearest kind it has.
func unknownKind(gvk schema.GroupVersionKind, known map[string]reflect.Type) error {
	kinds := make([]string, 0, len(known))
	for k := range known {
		if !strings.HasSuffix(k, "List") && !strings.HasSuffix(k, "Options") && k != "WatchEvent" && k != "Status" {
			kinds = append(kinds, k)
		}
	}
	slices.Sort(kinds)
	best, dist := "", 3
	for _, k := range kinds {
		if d := editDistance(strings.ToLower(k), strings.ToLower(gvk.Kind)); d < dist {
			best, dist = k, d
		}
	}
	if best != "" {
		return fmt.Errorf("%s has no kind %s: did you mean %s?", gvk.GroupVersion(), gvk.Kind, best)
	}
	return fmt.Errorf("%s has no kind %s (it has %s)", gvk.GroupVersion(), gvk.Kind, strings.Join(kinds, ", "))
}

// typeErrorRE matches encoding/json's type errors: "json: cannot unmarshal number into Go
// struct field ObjectMeta.metadata.labels of type string".
var typeErrorRE = regexp.MustCompile(`json: cannot unmarshal (\w+) into Go struct field \S*?\.([\w.\[\]]+) of type (\S+)`)

// readableDecodeError names the field and the types, without Go's struct names.
func readableDecodeError(err error) string {
	m := typeErrorRE.FindStringSubmatch(err.Error())
	if m == nil {
		return strings.TrimPrefix(err.Error(), "json: ")
	}
	want := m[3]
	switch {
	case strings.HasPrefix(want, "int"), strings.HasPrefix(want, "float"), strings.HasPrefix(want, "uint"):
		want = "number"
	case strings.HasPrefix(want, "map["):
		want = "mapping"
	case strings.HasPrefix(want, "[]"):
		want = "list"
	}
	hint := ""
	if want == "string" && (m[1] == "number" || m[1] == "bool") {
		hint = ` (quote the value: YAML reads an unquoted 1.5 or true as a ` + m[1] + `)`
	}
	return fmt.Sprintf(".%s: expected a %s, got a %s%s", m[2], want, m[1], hint)
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
