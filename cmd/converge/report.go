package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/engine"
)

// report is what "converge apply" prints: per-object actions, what was (or would be)
// pruned, a summary and the error, in a form for people or machines.
type report struct {
	Revision string         `json:"revision"`
	DryRun   bool           `json:"dryRun"`
	Objects  []objectReport `json:"objects"`
	Pruned   []objectReport `json:"pruned"`
	// Left are the objects that left the source and stay, pruning being off.
	Left    []objectReport `json:"left,omitempty"`
	Summary summary        `json:"summary"`
	Error   string         `json:"error,omitempty"`

	color bool // colour diffs (a terminal)
}

type objectReport struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	Action    string `json:"action"`
	Message   string `json:"message,omitempty"`
	Diff      string `json:"diff,omitempty"`
	Health    string `json:"health,omitempty"`
	// Wave is the object's wave when the set orders its objects (engine.Change.Wave).
	Wave string `json:"wave,omitempty"`
}

type summary struct {
	Created    int `json:"created"`
	Configured int `json:"configured"`
	Unchanged  int `json:"unchanged"`
	Pruned     int `json:"pruned"`
	Skipped    int `json:"skipped"`
	Failed     int `json:"failed"`
	NotReady   int `json:"notReady"`
	// Kept counts the objects that left the source and stay (no --prune).
	Kept int `json:"kept"`
}

// changes counts where the cluster differs from the source: what a dry-run would change,
// and the objects that left the source but stay without --prune.
func (s summary) changes() int { return s.Created + s.Configured + s.Pruned + s.Kept }

// keptMessage says why an object that left the source stays.
const keptMessage = "left the source; kept: pass --prune to delete it"

func newReport(revision string, dryRun bool, res *engine.Result, err error) *report {
	r := &report{Revision: revision, DryRun: dryRun, Objects: []objectReport{}, Pruned: []objectReport{}}
	if err != nil {
		r.Error = err.Error()
	}
	if res == nil {
		return r
	}
	health := map[string]string{}
	for _, h := range res.Health {
		health[h.ID] = h.Status
	}
	for _, c := range res.Changes {
		o := objectOf(c)
		o.Health = health[c.ID]
		r.Objects = append(r.Objects, o)
	}
	for _, c := range res.Pruned {
		r.Pruned = append(r.Pruned, objectOf(c))
	}
	for _, id := range res.Left {
		r.Left = append(r.Left, objectReport{Kind: id.GroupKind.Kind, Namespace: id.Namespace, Name: id.Name, Action: "kept", Message: keptMessage})
	}
	s := res.Summary()
	r.Summary = summary{s.Created, s.Configured, s.Unchanged, s.Pruned, s.Skipped, s.Failed, s.NotReady, len(res.Left)}
	return r
}

// empty reports whether the report has no object at all: the run stopped before the first.
func (r *report) empty() bool { return len(r.Objects) == 0 && len(r.Pruned) == 0 }

// dropDiffs removes the diffs (the engine computes them for every dry-run).
func (r *report) dropDiffs() {
	for i := range r.Objects {
		r.Objects[i].Diff = ""
	}
}

func objectOf(c engine.Change) objectReport {
	return objectReport{Kind: c.Object.GroupKind.Kind, Namespace: c.Object.Namespace, Name: c.Object.Name,
		Action: string(c.Action), Message: c.Message, Diff: c.Diff, Wave: c.Wave}
}

// redact passes the texts of the report that may quote a value (the error, each object's
// message and diff) through hide, before any format lays them out: YAML folds long lines,
// which a filter of the written text would miss.
func (r *report) redact(hide func(string) string) {
	r.Error = hide(r.Error)
	for _, objs := range [][]objectReport{r.Objects, r.Pruned, r.Left} {
		for i := range objs {
			objs[i].Message, objs[i].Diff = hide(objs[i].Message), hide(objs[i].Diff)
		}
	}
}

func (r *report) write(w io.Writer, format string) error {
	switch format {
	case "json", "yaml":
		return writeStructured(w, r, format)
	case "markdown":
		_, err := io.WriteString(w, r.markdown())
		return err
	}
	_, err := io.WriteString(w, r.text())
	return err
}

// writeStructured writes v as indented JSON or as YAML (format "json" or "yaml").
func writeStructured(w io.Writer, v any, format string) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	b, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

func (o objectReport) ref() string {
	if o.Namespace == "" {
		return o.Kind + "/" + o.Name
	}
	return o.Kind + "/" + o.Namespace + "/" + o.Name
}

// text is one line per object, diffs, and a summary line, for a terminal or a CI log.
func (r *report) text() string {
	var b strings.Builder
	verb := func(action string) string {
		if r.DryRun && action != "unchanged" && action != "failed" && action != "skipped" {
			return action + " (dry run)"
		}
		return action
	}
	for _, o := range r.Objects {
		fmt.Fprintf(&b, "%s %s", o.ref(), verb(o.Action))
		if o.Wave != "" {
			fmt.Fprintf(&b, " in wave %s", o.Wave)
		}
		if o.Message != "" {
			fmt.Fprintf(&b, ": %s", o.Message)
		}
		b.WriteString("\n")
	}
	for _, o := range r.Pruned {
		fmt.Fprintf(&b, "%s %s\n", o.ref(), verb(o.Action))
	}
	for _, o := range r.Left {
		fmt.Fprintf(&b, "%s %s\n", o.ref(), o.Message)
	}
	for _, o := range r.Objects {
		if o.Diff != "" {
			b.WriteString(colorDiff(o.Diff, r.color))
			if !strings.HasSuffix(o.Diff, "\n") {
				b.WriteString("\n")
			}
		}
	}
	s := r.Summary
	fmt.Fprintf(&b, "%d created, %d configured, %d unchanged, %d pruned, %d skipped, %d failed",
		s.Created, s.Configured, s.Unchanged, s.Pruned, s.Skipped, s.Failed)
	if s.NotReady > 0 {
		fmt.Fprintf(&b, ", %d not ready", s.NotReady)
	}
	if s.Kept > 0 {
		fmt.Fprintf(&b, ", %d left the source and kept (no --prune)", s.Kept)
	}
	if r.DryRun {
		b.WriteString(" (dry run)")
	}
	fmt.Fprintf(&b, " at %s\n", r.Revision)
	return b.String()
}

// colorDiff colours a unified diff for a terminal: additions green, removals red, hunks cyan.
func colorDiff(diff string, color bool) string {
	if !color {
		return diff
	}
	lines := strings.SplitAfter(diff, "\n")
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, "+++"), strings.HasPrefix(l, "---"):
			lines[i] = "\x1b[1m" + strings.TrimSuffix(l, "\n") + "\x1b[0m" + suffixNL(l)
		case strings.HasPrefix(l, "+"):
			lines[i] = "\x1b[32m" + strings.TrimSuffix(l, "\n") + "\x1b[0m" + suffixNL(l)
		case strings.HasPrefix(l, "-"):
			lines[i] = "\x1b[31m" + strings.TrimSuffix(l, "\n") + "\x1b[0m" + suffixNL(l)
		case strings.HasPrefix(l, "@@"):
			lines[i] = "\x1b[36m" + strings.TrimSuffix(l, "\n") + "\x1b[0m" + suffixNL(l)
		}
	}
	return strings.Join(lines, "")
}

func suffixNL(l string) string {
	if strings.HasSuffix(l, "\n") {
		return "\n"
	}
	return ""
}

// markdown is a pull-request comment: summary, changed objects with collapsed diffs, and
// what would be pruned.
func (r *report) markdown() string {
	var b strings.Builder
	s := r.Summary
	title := "Converge apply"
	if r.DryRun {
		title = "Converge dry-run"
	}
	fmt.Fprintf(&b, "### %s of `%s`\n\n", title, r.Revision)
	fmt.Fprintf(&b, "| created | configured | unchanged | pruned | failed |\n|---|---|---|---|---|\n| %d | %d | %d | %d | %d |\n\n",
		s.Created, s.Configured, s.Unchanged, s.Pruned, s.Failed)
	if r.Error != "" {
		fmt.Fprintf(&b, "**Error:**\n\n```\n%s\n```\n\n", r.Error)
	}
	for _, o := range r.Objects {
		if o.Action == "unchanged" {
			continue
		}
		fmt.Fprintf(&b, "- `%s` %s", o.ref(), o.Action)
		if o.Message != "" {
			fmt.Fprintf(&b, ": %s", o.Message)
		}
		b.WriteString("\n")
		if o.Diff != "" {
			fmt.Fprintf(&b, "  <details><summary>diff</summary>\n\n  ```diff\n%s  ```\n  </details>\n", indent(o.Diff, "  "))
		}
	}
	if len(r.Pruned) > 0 {
		b.WriteString("\n**Pruned:**\n\n")
		for _, o := range r.Pruned {
			fmt.Fprintf(&b, "- `%s`\n", o.ref())
		}
	}
	if len(r.Left) > 0 {
		b.WriteString("\n**Left the source, kept without `--prune`:**\n\n")
		for _, o := range r.Left {
			fmt.Fprintf(&b, "- `%s`\n", o.ref())
		}
	}
	return b.String()
}

func indent(s, prefix string) string {
	lines := strings.SplitAfter(s, "\n")
	var b strings.Builder
	for _, l := range lines {
		if l != "" {
			b.WriteString(prefix + l)
		}
	}
	if !strings.HasSuffix(s, "\n") {
		b.WriteString("\n")
	}
	return b.String()
}
