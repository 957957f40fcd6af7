package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/cli-utils/pkg/object"
	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// healthFlags are apply's spellings of a Sync's spec.healthChecks and
// spec.healthCheckExprs, so a pipeline can wait for what the daemon would wait for.
type healthFlags struct {
	checks    []string // --health-check [NAMESPACE/]KIND[.GROUP]/NAME
	exprsFile string   // --health-check-exprs FILE
}

func (f *healthFlags) addFlags(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringArrayVar(&f.checks, "health-check", nil,
		"also wait for this object, as [NAMESPACE/]KIND[.GROUP]/NAME (Deployment.apps/web, infra/Widget.example.com/w); repeatable; the namespace defaults to -n")
	fl.StringVar(&f.exprsFile, "health-check-exprs", "",
		"YAML file of CEL readiness rules per kind, the entries of a Sync's spec.healthCheckExprs (apiVersion, kind, current, inProgress, failed)")
}

// options returns the extra objects to wait for and the CEL rules, or an error naming the
// flag value or the file. defaultNS fills a check without namespace.
func (f *healthFlags) options(defaultNS string) ([]object.ObjMetadata, []engine.HealthExpr, error) {
	var checks []object.ObjMetadata
	for _, c := range f.checks {
		id, err := parseHealthCheck(c, defaultNS)
		if err != nil {
			return nil, nil, err
		}
		checks = append(checks, id)
	}
	if f.exprsFile == "" {
		return checks, nil, nil
	}
	exprs, err := readHealthExprs(f.exprsFile)
	if err != nil {
		return nil, nil, err
	}
	if _, err := engine.CompileHealthExprs(exprs); err != nil {
		return nil, nil, fmt.Errorf("--health-check-exprs %s: %w", f.exprsFile, err)
	}
	return checks, exprs, nil
}

// parseHealthCheck reads [NAMESPACE/]KIND[.GROUP]/NAME. The kind is case-sensitive (the
// object's kind, not kubectl's resource name); the group follows the first dot.
func parseHealthCheck(s, defaultNS string) (object.ObjMetadata, error) {
	parts := strings.Split(s, "/")
	ns := defaultNS
	switch len(parts) {
	case 2:
	case 3:
		ns, parts = parts[0], parts[1:]
	default:
		return object.ObjMetadata{}, fmt.Errorf("--health-check %q: want [NAMESPACE/]KIND[.GROUP]/NAME, e.g. Deployment.apps/web", s)
	}
	kind, group, _ := strings.Cut(parts[0], ".")
	if kind == "" || parts[1] == "" || ns == "" {
		return object.ObjMetadata{}, fmt.Errorf("--health-check %q: want [NAMESPACE/]KIND[.GROUP]/NAME, e.g. Deployment.apps/web", s)
	}
	return object.ObjMetadata{Namespace: ns, Name: parts[1], GroupKind: schema.GroupKind{Group: group, Kind: kind}}, nil
}

// readHealthExprs decodes a YAML list of spec.healthCheckExprs entries; an unknown field
// (a typo such as "curent") is an error naming the file rather than a rule ignored.
func readHealthExprs(path string) ([]engine.HealthExpr, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--health-check-exprs: %w", err)
	}
	var entries []v1alpha1.HealthCheckExpr
	if err := yaml.UnmarshalStrict(data, &entries); err != nil {
		return nil, fmt.Errorf("--health-check-exprs %s: want a YAML list of {apiVersion, kind, current, inProgress, failed}: %w", path, err)
	}
	exprs := make([]engine.HealthExpr, 0, len(entries))
	for i, e := range entries {
		if e.APIVersion == "" || e.Kind == "" || e.Current == "" {
			return nil, fmt.Errorf("--health-check-exprs %s: entry %d: apiVersion, kind and current are required", path, i)
		}
		exprs = append(exprs, engine.HealthExpr{APIVersion: e.APIVersion, Kind: e.Kind,
			Current: e.Current, InProgress: e.InProgress, Failed: e.Failed})
	}
	return exprs, nil
}
