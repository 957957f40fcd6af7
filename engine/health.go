package engine

import (
	"errors"
	"fmt"
	"strings"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/ext"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/cli-utils/pkg/object"
)

// HealthExpr is the readiness of one kind written as CEL expressions over the object, for
// custom resources whose status kstatus cannot read (no Ready condition, no
// observedGeneration). Its fields and meaning are those of Flux's Kustomization
// spec.healthCheckExprs, so expressions written for Flux work unchanged: the object's
// top-level fields (apiVersion, kind, metadata, spec, status) are the variables, e.g.
// "status.conditions.exists(c, c.type == 'Synced' && c.status == 'True')".
type HealthExpr struct {
	// APIVersion and Kind select the objects the expressions judge (by group and kind: the
	// version only names the group).
	APIVersion string
	Kind       string
	// Current is true when the object reached its desired state. Required.
	Current string
	// InProgress, when set and true, says the object is still on its way.
	InProgress string
	// Failed, when set and true, says the object will not get there: the wait ends at once.
	Failed string
}

// HealthRules are compiled HealthExprs, looked up by group and kind. The zero value and nil
// judge nothing (every kind goes to kstatus).
type HealthRules struct {
	byKind map[schema.GroupKind]*healthRule
}

// healthRule is one compiled HealthExpr.
type healthRule struct {
	index                       int
	inProgress, failed, current *healthProgram // inProgress and failed may be nil
}

// healthProgram is one compiled expression and where it came from, for messages.
type healthProgram struct {
	field string // "current", "inProgress", "failed"
	src   string
	prog  cel.Program
}

// healthVars are the variables an expression may use: the top-level fields of a Kubernetes
// object. A name outside them is an undeclared reference, rejected when compiled.
var healthVars = []string{"apiVersion", "kind", "metadata", "spec", "status"}

// healthCostLimit bounds the work of one evaluation (the per-expression limit the
// Kubernetes API server puts on validation rules), so a runaway comprehension over a large
// status cannot stall the wait.
const healthCostLimit = 1_000_000

// CompileHealthExprs checks and compiles exprs before anything is applied: an expression
// that does not parse, uses an undeclared name, or does not return a bool is an error
// naming the entry, its kind, the field and CEL's position ("healthCheckExprs[0]
// (example.com/v1 Widget).failed: ERROR: <input>:1:8: undeclared reference ..."). The
// errors of all entries are joined; they are terminal (retrying the same input fails
// again).
func CompileHealthExprs(exprs []HealthExpr) (*HealthRules, error) {
	if len(exprs) == 0 {
		return &HealthRules{}, nil
	}
	env, err := healthEnv()
	if err != nil {
		return nil, err
	}
	rules := &HealthRules{byKind: map[schema.GroupKind]*healthRule{}}
	var errs []error
	for i, x := range exprs {
		errs = append(errs, rules.compile(env, i, x)...)
	}
	if len(errs) > 0 {
		return nil, terminal(errors.Join(errs...))
	}
	return rules, nil
}

// healthEnv is the CEL environment of health expressions.
func healthEnv() (*cel.Env, error) {
	opts := []cel.EnvOption{
		cel.HomogeneousAggregateLiterals(),
		cel.DefaultUTCTimeZone(true),
		cel.CrossTypeNumericComparisons(true),
		cel.OptionalTypes(),
		ext.Strings(),
		ext.Sets(),
		ext.Encoders(),
	}
	for _, v := range healthVars {
		opts = append(opts, cel.Variable(v, cel.DynType))
	}
	env, err := cel.NewEnv(opts...)
	if err != nil {
		return nil, fmt.Errorf("healthCheckExprs: CEL environment: %w", err)
	}
	return env, nil
}

// compile adds the rule of x, the i-th expression, to h, or returns why it cannot.
func (h *HealthRules) compile(env *cel.Env, i int, x HealthExpr) []error {
	name := fmt.Sprintf("healthCheckExprs[%d] (%s %s)", i, x.APIVersion, x.Kind)
	gv, err := schema.ParseGroupVersion(x.APIVersion)
	switch {
	case x.APIVersion == "" || x.Kind == "":
		return []error{fmt.Errorf("%s: apiVersion and kind are required", name)}
	case err != nil:
		return []error{fmt.Errorf("%s.apiVersion: %w", name, err)}
	case x.Current == "":
		return []error{fmt.Errorf("%s.current: required", name)}
	}
	gk := schema.GroupKind{Group: gv.Group, Kind: x.Kind}
	if prev, ok := h.byKind[gk]; ok {
		return []error{fmt.Errorf("%s: %s is already judged by healthCheckExprs[%d]", name, gk, prev.index)}
	}
	r := &healthRule{index: i}
	var errs []error
	for _, f := range []struct {
		field, src string
		into       **healthProgram
	}{
		{"current", x.Current, &r.current},
		{"inProgress", x.InProgress, &r.inProgress},
		{"failed", x.Failed, &r.failed},
	} {
		if f.src == "" {
			continue
		}
		p, err := compileHealth(env, f.field, f.src)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s.%s: %w", name, f.field, err))
			continue
		}
		*f.into = p
	}
	h.byKind[gk] = r
	return errs
}

// compileHealth compiles one expression and requires a bool result (or dyn, checked when
// evaluated: a field of the object has no static type).
func compileHealth(env *cel.Env, field, src string) (*healthProgram, error) {
	ast, iss := env.Compile(src)
	if iss.Err() != nil {
		// CEL quotes the source under each error with a caret; the position is in the
		// error already, and a Sync's condition message stays one line per error.
		var lines []string
		for l := range strings.SplitSeq(iss.Err().Error(), "\n") {
			if !strings.HasPrefix(l, " | ") {
				lines = append(lines, l)
			}
		}
		return nil, errors.New(strings.Join(lines, "; "))
	}
	if t := ast.OutputType(); !t.IsExactType(cel.BoolType) && !t.IsExactType(cel.DynType) {
		return nil, fmt.Errorf("returns %s, not bool", t)
	}
	prog, err := env.Program(ast, cel.CostLimit(healthCostLimit))
	if err != nil {
		return nil, err
	}
	return &healthProgram{field: field, src: src, prog: prog}, nil
}

// judges reports whether an expression judges the objects of gk.
func (h *HealthRules) judges(gk schema.GroupKind) bool {
	return h != nil && h.byKind[gk] != nil
}

// compute is the status of u: by its kind's expressions when there are some, else kstatus'.
//
// As Flux does, an object whose status.observedGeneration differs from its
// metadata.generation is InProgress without evaluating anything, and the expressions are
// tried in the order inProgress, failed, current: the first true one gives the status,
// none true is InProgress. An evaluation error (a field that does not exist yet, a non-bool
// result) is returned: kstatus reports the object Unknown with it, and the wait goes on.
func (h *HealthRules) compute(u *unstructured.Unstructured) (*status.Result, error) {
	if !h.judges(u.GroupVersionKind().GroupKind()) {
		return status.Compute(u)
	}
	r := h.byKind[u.GroupVersionKind().GroupKind()]
	if og, ok, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration"); ok && og != u.GetGeneration() {
		return &status.Result{Status: status.InProgressStatus,
			Message: fmt.Sprintf("status.observedGeneration %d, metadata.generation %d", og, u.GetGeneration())}, nil
	}
	vars := make(map[string]any, len(healthVars))
	for _, v := range healthVars {
		if f, ok := u.Object[v]; ok {
			vars[v] = f
		}
	}
	for _, c := range []struct {
		p *healthProgram
		s status.Status
	}{
		{r.inProgress, status.InProgressStatus},
		{r.failed, status.FailedStatus},
		{r.current, status.CurrentStatus},
	} {
		if c.p == nil {
			continue
		}
		ok, err := c.p.eval(vars)
		if err != nil {
			return nil, fmt.Errorf("%s: healthCheckExprs[%d].%s: %w", Describe(idOf(u)), r.index, c.p.field, err)
		}
		if ok {
			return &status.Result{Status: c.s,
				Message: fmt.Sprintf("healthCheckExprs[%d].%s is true: %s", r.index, c.p.field, c.p.src)}, nil
		}
	}
	return &status.Result{Status: status.InProgressStatus,
		Message: fmt.Sprintf("healthCheckExprs[%d]: no expression is true yet", r.index)}, nil
}

// eval runs the program on vars and requires a bool.
func (p *healthProgram) eval(vars map[string]any) (bool, error) {
	v, _, err := p.prog.Eval(vars)
	if err != nil {
		return false, err
	}
	b, ok := v.(types.Bool)
	if !ok {
		return false, fmt.Errorf("returned %s, not bool", v.Type())
	}
	return bool(b), nil
}

// addHealthChecks adds checks to w: the namespace of a namespaced kind is filled in from
// defaultNamespace when empty (and dropped for a cluster-scoped kind), and those already in
// w (applied objects) are not added twice. Kinds the RESTMapper does not know are kept as
// given: the wait reports them. Kinds kstatus judges from metadata alone (ConfigMap, Secret,
// RBAC: readyOnExistence) are read as metadata only, and no object added here is read
// through the watch cache (waitSet.external): a health check never makes the cache hold
// Secret data, or every object of a kind the set does not apply.
func (e *Engine) addHealthChecks(w *waitSet, checks []object.ObjMetadata, defaultNamespace string) {
	seen := make(map[object.ObjMetadata]bool, len(w.ids)+len(checks))
	for _, id := range w.ids {
		seen[id] = true
	}
	for _, id := range checks {
		if m, err := e.mapper.RESTMapping(id.GroupKind); err == nil {
			switch {
			case m.Scope.Name() != meta.RESTScopeNameNamespace:
				id.Namespace = ""
			case id.Namespace == "":
				id.Namespace = defaultNamespace
			}
		}
		if seen[id] {
			continue
		}
		seen[id] = true
		w.ids = append(w.ids, id)
		if w.external == nil {
			w.external = map[object.ObjMetadata]bool{}
		}
		w.external[id] = true
		// A Service's type is unknown here: it is read whole (a LoadBalancer waits for its
		// ingress).
		stub := &unstructured.Unstructured{}
		stub.SetGroupVersionKind(id.GroupKind.WithVersion(""))
		if id.GroupKind != (schema.GroupKind{Kind: "Service"}) && readyOnExistence(stub) {
			w.byMeta[id] = true
		}
	}
}
