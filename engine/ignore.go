package engine

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/fluxcd/pkg/ssa/jsondiff"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/converge-dev/converge/inventory"
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
//
// A rule may also name field managers (Managers, Argo CD's managedFieldsManagers): every
// field of the desired object that one of them owns in the live object's managedFields (any
// operation, any subresource: kube-controller-manager's scale entry owning spec.replicas, a
// mutating webhook's injections) is left alone the same way. An ignored field that another
// manager owns and the run's apply does not is left out of the apply altogether rather than
// given the live value (ignore_owners.go). What the engine owns and finds its objects by
// (protectedBy) is never left alone, whoever owns it, and Converge's own managers are never
// named.

// IgnoreRule names fields to leave alone in the objects Target selects (nil: every object):
// Paths, JSON pointers (RFC 6901), and the fields that Managers own, field manager names or
// prefixes ending in "*". A rule has paths, managers or both.
type IgnoreRule struct {
	Paths    []string
	Managers []string
	Target   *ObjectSelector
}

// Limits of IgnoreRule.Managers.
const (
	MaxIgnoreManagers     = 32  // names in one rule
	MaxIgnoreManagerBytes = 128 // the API server's limit on a field manager's name
)

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
	// manager is the run's field manager, scopeKey the watch cache's scope label ("" for
	// none), and takesOver names the managers whose main-resource fields the run's
	// hand-over makes its own.
	manager, scopeKey string
	takesOver         func(string) bool
	mu                sync.Mutex
	orig              map[*item]*unstructured.Unstructured
	// seen counts, per rule with managers, the selected objects judged on the API server's
	// answer, and owned says one of them had a field its managers own that the render sets.
	seen  []map[*item]struct{}
	owned []bool
	// selected counts, per rule, the objects of the set it selects, and sets says one of
	// them sets a path of the rule: mark fills them, one object at a time, for unmatched.
	selected []int
	sets     []bool
	// steps counts the list elements adjust examined to find fields (elements.steps), all
	// objects together: the work that grows with the objects' lists.
	steps int64
}

// ignoreRule is one compiled rule and where it came from.
type ignoreRule struct {
	index    int
	sel      *jsondiff.SelectorRegex
	paths    []string
	managers []string
	// byMetadata: the target selects by labels, annotations or API version, which the
	// desired and the live object may not share (IgnoredFields leaves such a rule out).
	byMetadata bool
}

// newIgnorer compiles opts.Ignore for a run whose hand-over takes over managers when
// handsOver (it has an inventory); nil when there are no rules. A bad rule (a selector that
// does not compile, a path that is not a JSON pointer, a manager name that is empty, too
// long or Converge's own) is a terminal error naming it.
func newIgnorer(opts ApplyOptions, scopeKey string, handsOver bool) (*ignorer, error) {
	rules := opts.Ignore
	if len(rules) == 0 {
		return nil, nil
	}
	manager := fieldManagerOf(opts)
	ig := &ignorer{orig: map[*item]*unstructured.Unstructured{}, manager: manager, scopeKey: scopeKey,
		seen: make([]map[*item]struct{}, len(rules)), owned: make([]bool, len(rules)),
		selected: make([]int, len(rules)), sets: make([]bool, len(rules)),
		takesOver: func(name string) bool { return handsOver && listed(name, opts.TakeOverManagers) }}
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
		if len(r.Paths) == 0 && len(r.Managers) == 0 {
			return nil, terminal(fmt.Errorf("ignore rule %d: names neither paths nor managers", i))
		}
		if err := checkIgnoreManagers(r.Managers, manager); err != nil {
			return nil, terminal(fmt.Errorf("ignore rule %d: %w", i, err))
		}
		for _, p := range r.Paths {
			if !strings.HasPrefix(p, "/") {
				return nil, terminal(fmt.Errorf("ignore rule %d: path %q is not a JSON pointer (it starts with /)", i, p))
			}
			if k := protectedBy(p, scopeKey); k != "" {
				return nil, terminal(fmt.Errorf("ignore rule %d: path %q would leave %s to the live object: it is what the engine owns and finds its objects by, never ignored", i, p, k))
			}
		}
		byMetadata := r.Target != nil && (r.Target.LabelSelector != "" || r.Target.AnnotationSelector != "" || r.Target.Version != "")
		ig.rules = append(ig.rules, ignoreRule{index: i, sel: sel, paths: r.Paths, managers: r.Managers, byMetadata: byMetadata})
	}
	return ig, nil
}

// checkIgnoreManagers checks the managers of one rule, for a run whose field manager is
// manager: a bounded list of bounded, non-empty names, none of which is, or as a prefix
// covers, one of Converge's own managers (ownManager): a rule that left Converge's fields to
// the live object would stop the Sync from applying anything it names.
func checkIgnoreManagers(names []string, manager string) error {
	if len(names) > MaxIgnoreManagers {
		return fmt.Errorf("%d managers, more than the %d allowed", len(names), MaxIgnoreManagers)
	}
	for _, n := range names {
		prefix, isPrefix := strings.CutSuffix(n, "*")
		switch {
		case prefix == "" && !isPrefix:
			return fmt.Errorf("a manager name is empty")
		case len(n) > MaxIgnoreManagerBytes:
			return fmt.Errorf("manager %.32q... is longer than %d bytes", n, MaxIgnoreManagerBytes)
		case !isPrefix && ownManager(n, manager),
			isPrefix && (strings.HasPrefix(manager, prefix) || strings.HasPrefix(FieldManager+"-", prefix) ||
				strings.HasPrefix(prefix, FieldManager+"-")):
			return fmt.Errorf("manager %q names Converge's own field manager (%s): its fields are what the Sync applies, never ignored", n, manager)
		}
	}
	return nil
}

// protectedBy names the field an ignore path p is, contains or lies under among those the
// engine must set itself: the object's identity, the owner annotation (I11: an object whose
// apply left it out would be listed with no owner) and the watch cache's scope label
// (scopeKey, "" without a scope). "" when p touches none.
func protectedBy(p, scopeKey string) string {
	protected := []string{"/apiVersion", "/kind", "/metadata/name", "/metadata/namespace", "/metadata/uid",
		"/metadata/resourceVersion", "/metadata/managedFields", "/metadata/annotations/" + inventory.PointerToken(OwnerAnnotation)}
	if scopeKey != "" {
		protected = append(protected, "/metadata/labels/"+inventory.PointerToken(scopeKey))
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
		if len(r.paths) > 0 && r.sel.MatchUnstructured(obj) {
			out = append(out, r.paths...)
		}
	}
	return out
}

// selectsMeta says sel selects the object of kind gvk whose metadata is m, as
// MatchUnstructured does for a whole object.
func selectsMeta(sel *jsondiff.SelectorRegex, gvk schema.GroupVersionKind, m metav1.Object) bool {
	return sel.MatchNamespace(m.GetNamespace()) && sel.MatchName(m.GetName()) &&
		sel.MatchGVK(gvk.Group, gvk.Version, gvk.Kind) &&
		sel.MatchLabelSelector(m.GetLabels()) && sel.MatchAnnotationSelector(m.GetAnnotations())
}

// unmatched describes the rules that leave every object of the set alone: the target
// selects none, or no selected object sets any of the rule's paths, as mark counted them. A
// rule with managers is judged on the live objects instead (unowned). The run goes on; the
// caller reports them (a rule that matches nothing is usually a typo).
func (ig *ignorer) unmatched() []string {
	if ig == nil {
		return nil
	}
	var out []string
	for i, r := range ig.rules {
		selected, set := ig.selected[i], ig.sets[i]
		switch {
		case selected == 0:
			out = append(out, fmt.Sprintf("ignore rule %d selects no object of the set", r.index))
		case !set && len(r.managers) == 0:
			out = append(out, fmt.Sprintf("ignore rule %d: none of the %d objects it selects sets %s", r.index, selected, strings.Join(r.paths, ", ")))
		case set:
			ig.owned[r.index] = true // matched by its paths: its managers need not be looked for
		}
	}
	return out
}

// unowned describes the rules with managers that left nothing alone in the objects the run
// judged on the API server's answer: none had a field the rule's managers own and the
// render sets (nor, with paths too, set a path of the rule). A rule that judged no existing
// object (all new, or decided by the watch cache's memo) is not described: nothing is known.
func (ig *ignorer) unowned() []string {
	if ig == nil {
		return nil
	}
	ig.mu.Lock()
	defer ig.mu.Unlock()
	var out []string
	for _, r := range ig.rules {
		if len(r.managers) == 0 || len(ig.seen[r.index]) == 0 || ig.owned[r.index] {
			continue
		}
		what := ""
		if len(r.paths) > 0 {
			what = " sets " + strings.Join(r.paths, ", ") + " or"
		}
		out = append(out, fmt.Sprintf("ignore rule %d: none of the %d existing objects it selects%s has a field that %s own and the render sets",
			r.index, len(ig.seen[r.index]), what, strings.Join(r.managers, ", ")))
	}
	return out
}

// mark flags the items some rule selects (item.ignored), and counts for unmatched which
// rules select them and whether they set the rules' paths. Each object is read once, while
// the run prepares it (a set given as JSON is decoded one object at a time). A nil ignorer
// marks none.
func (ig *ignorer) mark(items ...*item) {
	if ig == nil {
		return
	}
	for _, it := range items {
		it.ignored, it.kept = ig.selects(it.obj)
		for i, r := range ig.rules {
			if ig.sets[i] || !r.sel.MatchUnstructured(it.obj) {
				continue // a rule that matches learns nothing more from its count
			}
			ig.selected[i]++
			for _, p := range r.paths {
				if _, ok := pointerGet(it.obj.Object, p); ok {
					ig.sets[i] = true
					break
				}
			}
		}
	}
}

// selects says some rule selects obj, and lists the managers those rules name.
func (ig *ignorer) selects(obj *unstructured.Unstructured) (selected bool, managers []string) {
	for _, r := range ig.rules {
		if r.sel.MatchUnstructured(obj) {
			selected = true
			managers = append(managers, r.managers...)
		}
	}
	return selected, managers
}

// forget drops what the run kept of it's object (its object as rendered, for adjust).
func (ig *ignorer) forget(it *item) {
	if ig == nil || !it.ignored {
		return
	}
	ig.mu.Lock()
	delete(ig.orig, it)
	ig.mu.Unlock()
}

// adjust sets it.obj to its desired object as rendered with each ignored field it sets
// taken from live, or left out when live has none, or when another manager owns it in live
// and the run's apply does not (leaveToOthers); nothing changes for a new object (nil live)
// or one no rule selects.
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
	var set []string // the ignored paths the desired object sets
	for _, p := range ig.paths(orig) {
		if _, ok := pointerGet(out.Object, p); !ok {
			continue
		}
		set = append(set, p)
		if v, ok := pointerGet(live.Object, p); ok {
			pointerSet(out.Object, p, deepCopyValue(v))
		} else {
			pointerRemove(out.Object, p)
		}
	}
	ig.leaveToOthers(it, orig, out, live, set)
	it.obj = out
}

// leaveToOthers finishes out, the desired object orig with its ignored paths (set) taken
// from live: a field under them that another manager owns in live and the run's apply does
// not is left out; so is each field of out that the managers of a rule selecting orig own
// and the run's apply does not, while one the run's apply owns too takes the live value
// (leaving it out would only drop the run's share: the dry-run would find nothing to send,
// and every later run would dry-run the object again).
func (ig *ignorer) leaveToOthers(it *item, orig, out, live *unstructured.Unstructured, set []string) {
	var rules []ignoreRule
	for _, r := range ig.rules {
		if len(r.managers) > 0 && r.sel.MatchUnstructured(orig) {
			rules = append(rules, r)
		}
	}
	if len(set) == 0 && len(rules) == 0 {
		return
	}
	x := &elements{}
	defer func() {
		ig.mu.Lock()
		ig.steps += x.steps
		ig.mu.Unlock()
	}()
	own := readOwnership(live, ig.manager, func(name string) bool { return ig.takesOver(name) && !namedIn(name, it.kept) })
	if len(set) > 0 {
		toks := make([][]string, len(set))
		for i, p := range set {
			toks[i] = pointerTokens(p)
		}
		for leaf := range own.others.Leaves().All() {
			if !mayLieUnder(leaf, toks) {
				continue // not looked for: only the fields under the rules' paths are
			}
			if s, ok := x.locate(out.Object, leaf); ok && under(s.pointer(), set) && !own.ours.Has(leaf) {
				s.leaveOut(out.Object)
			}
		}
	}
	for _, r := range rules {
		found := false
		for leaf := range own.of(r.managers).Leaves().All() {
			s, ok := x.locate(out.Object, leaf)
			if !ok || protectedBy(s.pointer(), ig.scopeKey) != "" {
				continue
			}
			found = true
			if !own.ours.Has(leaf) {
				s.leaveOut(out.Object)
			} else if l, ok := x.locate(live.Object, leaf); ok {
				s.set(deepCopyValue(l.value))
			}
		}
		ig.mu.Lock()
		if ig.seen[r.index] == nil {
			ig.seen[r.index] = map[*item]struct{}{}
		}
		ig.seen[r.index][it] = struct{}{}
		ig.owned[r.index] = ig.owned[r.index] || found
		ig.mu.Unlock()
	}
}

// mayLieUnder reports whether the field at p can lie at or under one of the JSON pointers
// whose tokens are paths, judged on p alone (a list element may be at any position): what
// cannot is not looked for in the object.
func mayLieUnder(p fieldpath.Path, paths [][]string) bool {
	for _, toks := range paths {
		if len(p) < len(toks) {
			continue
		}
		i := 0
		for ; i < len(toks); i++ {
			pe := p[i]
			if pe.FieldName != nil && *pe.FieldName != toks[i] || pe.FieldName == nil && pe.Key == nil && pe.Value == nil {
				break
			}
		}
		if i == len(toks) {
			return true
		}
	}
	return false
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
