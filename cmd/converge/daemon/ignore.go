package daemon

import (
	"strings"

	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// ignoreRules is spec.ignore as the engine's rules.
func ignoreRules(s *v1alpha1.Sync) []engine.IgnoreRule {
	var out []engine.IgnoreRule
	for _, r := range s.Spec.Ignore {
		rule := engine.IgnoreRule{Paths: r.Paths, Managers: r.Managers}
		if t := r.Target; t != nil {
			rule.Target = &engine.ObjectSelector{Group: t.Group, Version: t.Version, Kind: t.Kind, Name: t.Name,
				Namespace: t.Namespace, LabelSelector: t.LabelSelector, AnnotationSelector: t.AnnotationSelector}
		}
		out = append(out, rule)
	}
	return out
}

// ignoreNote is what the Ready message says of the spec.ignore rules that matched nothing
// of the render ("" when every rule matched): not a failure, but usually a typo. It is the
// same for every reconcile of one render, so it causes no status churn.
func ignoreNote(res *engine.Result) string {
	if res == nil || len(res.IgnoreUnmatched) == 0 {
		return ""
	}
	return "; spec.ignore: " + strings.Join(res.IgnoreUnmatched, "; ")
}
