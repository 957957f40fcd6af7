package main

import (
	"fmt"
	"os"

	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// readIgnoreRules reads apply's --ignore-rules FILE: a YAML list of the entries of a Sync's
// spec.ignore ({paths, managers, target}), so a pipeline's dry-run leaves alone what the
// daemon does. The engine checks the paths and managers, naming the entry (its rule index).
// "" reads nothing.
func readIgnoreRules(path string) ([]engine.IgnoreRule, error) {
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--ignore-rules: %w", err)
	}
	var entries []v1alpha1.IgnoreRule
	if err := yaml.UnmarshalStrict(data, &entries); err != nil {
		return nil, fmt.Errorf("--ignore-rules %s: want a YAML list of {paths, managers, target}: %w", path, err)
	}
	rules := make([]engine.IgnoreRule, 0, len(entries))
	for i, e := range entries {
		if len(e.Paths) == 0 && len(e.Managers) == 0 {
			return nil, fmt.Errorf("--ignore-rules %s: entry %d: paths or managers is required", path, i)
		}
		r := engine.IgnoreRule{Paths: e.Paths, Managers: e.Managers}
		if t := e.Target; t != nil {
			r.Target = &engine.ObjectSelector{Group: t.Group, Version: t.Version, Kind: t.Kind, Name: t.Name,
				Namespace: t.Namespace, LabelSelector: t.LabelSelector, AnnotationSelector: t.AnnotationSelector}
		}
		rules = append(rules, r)
	}
	return rules, nil
}

// ignoreUnmatched is what a run reports of the rules that matched nothing; none for nil.
func ignoreUnmatched(res *engine.Result) []string {
	if res == nil {
		return nil
	}
	return res.IgnoreUnmatched
}
