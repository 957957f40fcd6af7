package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/printers"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// maxTraceFields bounds the fields listed per field manager.
const maxTraceFields = 20

// printTrace writes t as flux trace does: one "Key: value" line each, aligned.
func printTrace(out io.Writer, t *traceResult) error {
	tw := printers.GetNewTabWriter(out)
	line := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	line("Object", t.Object.Kind+"/"+t.Object.Name)
	line("Namespace", t.Object.Namespace)
	line("Health", t.Health)
	line("Owner", t.Owner)
	if s := t.Sync; s != nil {
		line("Sync", s.Namespace+"/"+s.Name)
		line("Sync ready", s.Ready)
		line("Sync suspended", boolCell(s.Suspended))
		if t.Inventoried != nil {
			line("Inventoried", boolCell(*t.Inventoried))
		}
	}
	if src := t.Source; src != nil {
		line("Source", src.URL)
		line("Ref", src.Ref)
		line("Path", src.Path)
	}
	line("Revision", t.Revision)
	line("File", t.File)
	for i, m := range t.FieldManagers {
		k := "" // the manager lines after the first stay under the first
		if i == 0 {
			k = "Field managers:"
		}
		fmt.Fprintf(tw, "%s\t%s\n", k, managerLine(m))
	}
	return tw.Flush()
}

// managerLine is "converge (Apply, 2026-11-27T06:00:00Z): data.version, metadata.labels.app".
func managerLine(m fieldManager) string {
	what := m.Operation
	if m.Subresource != "" {
		what += " " + m.Subresource
	}
	if m.Time != nil {
		what += ", " + m.Time.UTC().Format(time.RFC3339)
	}
	s := fmt.Sprintf("%s (%s)", m.Manager, what)
	if len(m.Fields) > 0 {
		s += ": " + strings.Join(m.Fields, ", ")
	}
	return s
}

// managerNames lists the managers of ms for a message, "none" when there are none.
func managerNames(ms []fieldManager) string {
	var names []string
	for _, m := range ms {
		if !slices.Contains(names, m.Manager) {
			names = append(names, m.Manager)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// fieldManagers are the managedFields of u, newest first, with the fields each owns (leaves,
// at most maxTraceFields, metadata.managedFields' own bookkeeping left out).
func fieldManagers(u *unstructured.Unstructured) []fieldManager {
	out := []fieldManager{}
	for _, mf := range u.GetManagedFields() {
		m := fieldManager{Manager: mf.Manager, Operation: string(mf.Operation), Subresource: mf.Subresource, Time: mf.Time}
		if mf.FieldsV1 != nil {
			var tree map[string]any
			if json.Unmarshal(mf.FieldsV1.Raw, &tree) == nil {
				m.Fields = leafFields("", tree)
				if len(m.Fields) > maxTraceFields {
					m.Fields = append(m.Fields[:maxTraceFields], fmt.Sprintf("… %d more", len(m.Fields)-maxTraceFields))
				}
			}
		}
		out = append(out, m)
	}
	slices.SortStableFunc(out, func(a, b fieldManager) int {
		switch {
		case a.Time == nil || b.Time == nil:
			return 0
		default:
			return b.Time.Compare(a.Time.Time)
		}
	})
	return out
}

// leafFields flattens a FieldsV1 tree ({"f:data":{"f:version":{}}}) into sorted paths
// ("data.version"); list items keyed by k:/v: show as [key].
func leafFields(prefix string, tree map[string]any) []string {
	var out []string
	for k, v := range tree {
		if k == "." {
			continue
		}
		name := k
		switch {
		case strings.HasPrefix(k, "f:"):
			name = k[2:]
		case strings.HasPrefix(k, "k:"), strings.HasPrefix(k, "v:"), strings.HasPrefix(k, "i:"):
			name = "[" + k[2:] + "]"
		}
		path := name
		if prefix != "" {
			path = prefix + "." + name
			if strings.HasPrefix(name, "[") {
				path = prefix + name
			}
		}
		sub, _ := v.(map[string]any)
		if kids := leafFields(path, sub); len(kids) > 0 {
			out = append(out, kids...)
		} else {
			out = append(out, path)
		}
	}
	slices.Sort(out)
	return out
}

// gitRefString is the ref of a git source as converge apply --ref takes it.
func gitRefString(r v1alpha1.GitRef) string {
	switch {
	case r.Commit != "":
		return "commit:" + r.Commit
	case r.Tag != "":
		return "tag:" + r.Tag
	case r.SemVer != "":
		return "semver:" + r.SemVer
	case r.Branch != "":
		return "branch:" + r.Branch
	}
	return "branch:main"
}
