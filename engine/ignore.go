package engine

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/fluxcd/pkg/ssa/jsondiff"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Fields to leave alone (ApplyOptions.Ignore, Flux's Kustomization spec.ignore): a field of
// the desired object that a rule names is never set against the live object and never
// compared with it. For an object that exists, before it is judged, each such field is given
// the live object's value (so the apply, the dry-run, the diff and appliedAsDesired all see
// what is there), or left out when the live object has none; a new object is created with
// the desired value, as Flux does. A change another manager makes to the field therefore
// changes nothing an apply would send: no diff, no apply, and the memo's shortcut for a new
// desired hash ("configured at once") is not taken for such an object, since only the live
// value can say what to send. Only paths the desired object sets are touched: a field the
// render does not set is not ours anyway.

// IgnoreRule names fields to leave alone: Paths, JSON pointers (RFC 6901), of the objects
// Target selects (nil: every object).
type IgnoreRule struct {
	Paths  []string
	Target *ObjectSelector
}

// ObjectSelector selects objects as a kustomize patch target or a Flux ignore rule does:
// Group, Version, Kind, Name and Namespace are regular expressions matched whole, and
// LabelSelector and AnnotationSelector are selector expressions; empty fields match all.
type ObjectSelector struct {
	Group, Version, Kind, Name, Namespace string
	LabelSelector, AnnotationSelector     string
}

// ignorer applies a run's compiled rules to its items, keeping each matched item's desired
// object as rendered so that every attempt starts from it.
type ignorer struct {
	rules []ignoreRule
	mu    sync.Mutex
	orig  map[*item]*unstructured.Unstructured
}

// ignoreRule is one compiled rule and where it came from.
type ignoreRule struct {
	index int
	sel   *jsondiff.SelectorRegex
	paths []string
}

// newIgnorer compiles rules; nil when there are none. A bad rule (a selector that does not
// compile, a path that is not a JSON pointer) is a terminal error naming it.
func newIgnorer(rules []IgnoreRule, scopeKey string) (*ignorer, error) {
	if len(rules) == 0 {
		return nil, nil
	}
	ig := &ignorer{orig: map[*item]*unstructured.Unstructured{}}
	for i, r := range rules {
		var js *jsondiff.Selector
		if t := r.Target; t != nil {
			js = &jsondiff.Selector{Group: t.Group, Version: t.Version, Kind: t.Kind, Name: t.Name, Namespace: t.Namespace,
				LabelSelector: t.LabelSelector, AnnotationSelector: t.AnnotationSelector}
		}
		sel, err := jsondiff.NewSelectorRegex(js)
		if err != nil {
			return nil, terminal(fmt.Errorf("ignore rule %d: target: %w", i, err))
		}
		for _, p := range r.Paths {
			if !strings.HasPrefix(p, "/") {
				return nil, terminal(fmt.Errorf("ignore rule %d: path %q is not a JSON pointer (it starts with /)", i, p))
			}
			if k := protectedBy(p, scopeKey); k != "" {
				return nil, terminal(fmt.Errorf("ignore rule %d: path %q would leave %s to the live object: it is what the engine owns and finds its objects by, never ignored", i, p, k))
			}
		}
		ig.rules = append(ig.rules, ignoreRule{index: i, sel: sel, paths: r.Paths})
	}
	return ig, nil
}

// pointerEscaper escapes a key as one JSON-pointer token (RFC 6901).
var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// protectedBy names the field an ignore path p is, contains or lies under among those the
// engine must set itself: the object's identity, the owner annotation (I11: an object whose
// apply left it out would be listed with no owner) and the watch cache's scope label
// (scopeKey, "" without a scope). "" when p touches none.
func protectedBy(p, scopeKey string) string {
	protected := []string{"/apiVersion", "/kind", "/metadata/name", "/metadata/namespace", "/metadata/uid",
		"/metadata/resourceVersion", "/metadata/managedFields", "/metadata/annotations/" + pointerEscaper.Replace(OwnerAnnotation)}
	if scopeKey != "" {
		protected = append(protected, "/metadata/labels/"+pointerEscaper.Replace(scopeKey))
	}
	for _, f := range protected {
		if p == f || strings.HasPrefix(f, p+"/") || strings.HasPrefix(p, f+"/") {
			return f
		}
	}
	return ""
}

// paths returns the paths of the rules that select obj.
func (ig *ignorer) paths(obj *unstructured.Unstructured) []string {
	var out []string
	for _, r := range ig.rules {
		if r.sel.MatchUnstructured(obj) {
			out = append(out, r.paths...)
		}
	}
	return out
}

// unmatched describes the rules that leave every object of the set alone: the target
// selects none, or no selected object sets any of the rule's paths. The run goes on; the
// caller reports them (a rule that matches nothing is usually a typo).
func (ig *ignorer) unmatched(items []*item) []string {
	if ig == nil {
		return nil
	}
	var out []string
	for _, r := range ig.rules {
		selected, set := 0, false
		for _, it := range items {
			if set {
				break // the rule matches: nothing more to learn from the other objects
			}
			if !r.sel.MatchUnstructured(it.obj) {
				continue
			}
			selected++
			for _, p := range r.paths {
				if _, ok := pointerGet(it.obj.Object, p); ok {
					set = true
					break
				}
			}
		}
		switch {
		case selected == 0:
			out = append(out, fmt.Sprintf("ignore rule %d selects no object of the set", r.index))
		case !set:
			out = append(out, fmt.Sprintf("ignore rule %d: none of the %d objects it selects sets %s", r.index, selected, strings.Join(r.paths, ", ")))
		}
	}
	return out
}

// mark flags the items some rule selects (item.ignored). A nil ignorer marks none.
func (ig *ignorer) mark(items []*item) {
	if ig == nil {
		return
	}
	for _, it := range items {
		it.ignored = ig.selects(it.obj)
	}
}

// selects says some rule with paths selects obj: what paths would return is not empty.
func (ig *ignorer) selects(obj *unstructured.Unstructured) bool {
	for _, r := range ig.rules {
		if len(r.paths) > 0 && r.sel.MatchUnstructured(obj) {
			return true
		}
	}
	return false
}

// adjust sets it.obj to its desired object as rendered with each ignored field it sets
// taken from live, or left out when live has none; nothing changes for a new object (nil
// live) or one no rule selects.
func (ig *ignorer) adjust(it *item, live *unstructured.Unstructured) {
	if ig == nil || !it.ignored {
		return
	}
	ig.mu.Lock()
	orig, ok := ig.orig[it]
	if !ok {
		orig = it.obj
		ig.orig[it] = orig
	}
	ig.mu.Unlock()
	if live == nil {
		it.obj = orig
		return
	}
	out := orig.DeepCopy()
	for _, p := range ig.paths(orig) {
		if _, set := pointerGet(out.Object, p); !set {
			continue
		}
		if v, ok := pointerGet(live.Object, p); ok {
			pointerSet(out.Object, p, deepCopyValue(v))
		} else {
			pointerRemove(out.Object, p)
		}
	}
	it.obj = out
}

// deepCopyValue copies a JSON value of an unstructured object.
func deepCopyValue(v any) any {
	return (&unstructured.Unstructured{Object: map[string]any{"v": v}}).DeepCopy().Object["v"]
}

// pointerTokens splits a JSON pointer (RFC 6901) into its unescaped tokens.
func pointerTokens(p string) []string {
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for i, t := range parts {
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return parts
}

// pointerParent walks to the container of p's last token in obj.
func pointerParent(obj map[string]any, p string) (any, string, bool) {
	toks := pointerTokens(p)
	var cur any = obj
	for _, t := range toks[:len(toks)-1] {
		next, ok := child(cur, t)
		if !ok {
			return nil, "", false
		}
		cur = next
	}
	return cur, toks[len(toks)-1], true
}

// child is the element t of a map or list.
func child(cur any, t string) (any, bool) {
	switch c := cur.(type) {
	case map[string]any:
		v, ok := c[t]
		return v, ok
	case []any:
		i, err := strconv.Atoi(t)
		if err != nil || i < 0 || i >= len(c) {
			return nil, false
		}
		return c[i], true
	}
	return nil, false
}

// pointerGet returns the value at p in obj.
func pointerGet(obj map[string]any, p string) (any, bool) {
	parent, last, ok := pointerParent(obj, p)
	if !ok {
		return nil, false
	}
	return child(parent, last)
}

// pointerSet replaces the value at p in obj, which must exist.
func pointerSet(obj map[string]any, p string, v any) {
	parent, last, ok := pointerParent(obj, p)
	if !ok {
		return
	}
	switch c := parent.(type) {
	case map[string]any:
		c[last] = v
	case []any:
		if i, err := strconv.Atoi(last); err == nil && i >= 0 && i < len(c) {
			c[i] = v
		}
	}
}

// pointerRemove removes the map key at p in obj. A list element is left as it is: removing
// it would shift the positions that other paths name.
func pointerRemove(obj map[string]any, p string) {
	if parent, last, ok := pointerParent(obj, p); ok {
		if m, isMap := parent.(map[string]any); isMap {
			delete(m, last)
		}
	}
}
