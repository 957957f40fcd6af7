package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/sources/pipeline"
	"github.com/converge-dev/converge/sources/varsubst"
)

// substituteFlags are the CLI's spec.postBuild: variables from files and from the command
// line, substituted in the rendered objects as the daemon does. "converge build" and
// "converge apply" share them (through sourceFlags).
type substituteFlags struct {
	vars   []string // --substitute NAME=VALUE, in order
	files  []string // --substitute-from-file FILE, in order
	strict bool     // --strict-substitute
}

func (f *substituteFlags) addFlags(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringArrayVar(&f.vars, "substitute", nil, "substitute ${NAME} with VALUE in the rendered objects (NAME=VALUE, repeatable; wins over --substitute-from-file)")
	fl.StringArrayVar(&f.files, "substitute-from-file", nil, "read substitution variables from FILE: KEY=VALUE lines (a .env file, as flux debug ks --show-vars prints), or a ConfigMap or Secret manifest (.yaml, .yml, .json; apply masks Secret values in its report, build prints the objects as substituted); repeatable, a later file wins")
	fl.BoolVar(&f.strict, "strict-substitute", false, "fail on a ${NAME} without value and without default (as spec.postBuild.strict)")
}

// substitution is how the pipeline substitutes the variables of the flags, nil without a
// substitution flag. What substitution inserts is bounded by limits: --max-file-size per
// object, --max-total-size in all.
func (f *substituteFlags) substitution(limits sources.Limits) *pipeline.Substitution {
	if len(f.vars) == 0 && len(f.files) == 0 {
		return nil
	}
	return &pipeline.Substitution{
		Variables:     func(context.Context) ([]varsubst.Source, error) { return f.variables() },
		Strict:        f.strict,
		MaxObjectSize: limits.MaxFileSize,
		MaxTotalSize:  limits.MaxTotalSize,
	}
}

// variables reads the files, in order, then the --substitute values, which win. What was
// read before an error is returned with it.
func (f *substituteFlags) variables() ([]varsubst.Source, error) {
	var srcs []varsubst.Source
	for _, file := range f.files {
		s, err := readVarFile(file)
		srcs = append(srcs, s...)
		if err != nil {
			return srcs, err
		}
	}
	inline := varsubst.Source{Name: "--substitute", Values: map[string]string{}}
	for _, kv := range f.vars {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return srcs, fmt.Errorf("--substitute %q: want NAME=VALUE", kv)
		}
		inline.Values[k] = v
	}
	return append(srcs, inline), nil
}

// readVarFile reads one --substitute-from-file: a ConfigMap or Secret manifest (one or more
// documents) by its extension, else KEY=VALUE lines.
func readVarFile(file string) ([]varsubst.Source, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--substitute-from-file: %w", err)
	}
	switch strings.ToLower(filepath.Ext(file)) {
	case ".yaml", ".yml", ".json":
		return readManifests(file, data)
	}
	s, err := readDotenv(file, data)
	return []varsubst.Source{s}, err
}

var dotenvName = regexp.MustCompile(`^[_[:alpha:]][_[:alpha:][:digit:]]*$`)

// readDotenv reads KEY=VALUE lines: blank lines and lines starting with # are skipped, an
// "export " prefix is allowed, a value in matching single or double quotes is unquoted
// (no escapes), anything else is taken as it is. Errors name the file and the line.
func readDotenv(file string, data []byte) (varsubst.Source, error) {
	s := varsubst.Source{Name: file, Values: map[string]string{}}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(k)
		if !ok {
			return s, fmt.Errorf("%s:%d: want KEY=VALUE", file, n)
		}
		if !dotenvName.MatchString(k) {
			return s, fmt.Errorf("%s:%d: %q is not a valid variable name (letters, digits and _, not starting with a digit)", file, n, k)
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		s.Values[k] = v
	}
	if err := sc.Err(); err != nil {
		return s, fmt.Errorf("%s: %w", file, err)
	}
	return s, nil
}

// readManifests reads ConfigMap and Secret manifests, as substituteFrom would read them from
// the cluster: a ConfigMap's data, a Secret's data (decoded) and stringData (which wins).
func readManifests(file string, data []byte) ([]varsubst.Source, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []varsubst.Source
	for doc := 1; ; doc++ {
		var raw map[string]any
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, doc, err)
		}
		if raw == nil {
			continue
		}
		js, err := yaml.Marshal(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, doc, err)
		}
		kind, _ := raw["kind"].(string)
		switch kind {
		case "ConfigMap":
			var cm corev1.ConfigMap
			if err := yaml.UnmarshalStrict(js, &cm); err != nil {
				return nil, fmt.Errorf("%s: document %d: ConfigMap: %w", file, doc, err)
			}
			out = append(out, varsubst.Source{Name: fmt.Sprintf("%s: ConfigMap %s", file, cm.Name), Values: cm.Data})
		case "Secret":
			var sec corev1.Secret
			if err := yaml.UnmarshalStrict(js, &sec); err != nil {
				return nil, fmt.Errorf("%s: document %d: Secret: %w", file, doc, err)
			}
			values := map[string]string{}
			for k, v := range sec.Data {
				values[k] = string(v)
			}
			for k, v := range sec.StringData {
				values[k] = v
			}
			out = append(out, varsubst.Source{Name: fmt.Sprintf("%s: Secret %s", file, sec.Name), Values: values, Sensitive: true})
		default:
			return nil, fmt.Errorf("%s: document %d: kind %q: want a ConfigMap or Secret (or KEY=VALUE lines in a file not named .yaml, .yml or .json)", file, doc, kind)
		}
	}
	return out, nil
}
