package daemon

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// maxValuesBytes bounds the Helm values of one Sync: the keys its valuesFrom reads and its
// inline values together. A chart's values are kilobytes; a ConfigMap a tenant fills up
// must not make the daemon parse and hold (and send to a render child) tens of MiB.
const maxValuesBytes = 4 << 20

// defaultValuesKey is the key valuesFrom reads when it names none, as Flux's.
const defaultValuesKey = "values.yaml"

// valuesFrom reads the ConfigMaps and Secrets of spec.source.helm.valuesFrom as the user s
// acts as (I13: naming a Secret in a Sync must not let a tenant read what it could not
// read itself), one GET each, and merges them in order into one values map (a later
// entry wins, map by map, as Flux merges them). A missing object or key is skipped when
// the entry is optional; any other failure is an error naming the entry and the object.
// secretValues are the values read from Secrets, for redaction, also when err is not nil:
// no message quotes a Secret's content, and a YAML error about a Secret's key gives the
// line only, never the parser's text (it may quote the value). read counts the bytes of
// the keys read, which maxValuesBytes bounds.
func (r *reconciler) valuesFrom(ctx context.Context, s *v1alpha1.Sync) (vals map[string]any, secretValues []string, read int, err error) {
	vals = map[string]any{}
	for i, ref := range s.Spec.Source.Helm.ValuesFrom {
		field := fmt.Sprintf("spec.source.helm.valuesFrom[%d]", i)
		obj := fmt.Sprintf("%s %s/%s", ref.Kind, s.Namespace, ref.Name)
		key := ref.ValuesKey
		if key == "" {
			key = defaultValuesKey
		}
		data, found, readErr := r.valuesKey(ctx, s, ref.Kind, ref.Name, key)
		switch {
		case ref.Optional && (apierrors.IsNotFound(readErr) || readErr == nil && !found):
			continue
		case readErr != nil:
			return nil, secretValues, read, fmt.Errorf("%s: %s read as %s: %w", field, obj, r.engines.identity(s), readErr)
		case !found:
			return nil, secretValues, read, fmt.Errorf("%s: %s has no key %q (set optional to render without it)", field, obj, key)
		}
		secret := ref.Kind == "Secret"
		if secret {
			secretValues = append(secretValues, string(data))
		}
		if read += len(data); read > maxValuesBytes {
			return nil, secretValues, read, fmt.Errorf("%s: %s key %q: the Helm values pass %d MiB, the most one Sync may have", field, obj, key, maxValuesBytes>>20)
		}
		if ref.TargetPath != "" {
			if secret { // as set: without its quotes; as a template may print it: trimmed
				secretValues = sources.AppendLeaves(secretValues, sources.TargetValue(string(data)))
				secretValues = append(secretValues, strings.TrimSpace(string(data)))
			}
			if err := sources.SetTargetPath(vals, ref.TargetPath, string(data)); err != nil {
				return nil, secretValues, read, fmt.Errorf("%s: targetPath %q: %w", field, ref.TargetPath, err)
			}
		} else {
			// Aliases are refused past the bound before the decoder expands them: a few KiB of
			// anchors can stand for gigabytes of values.
			if err := sources.CheckAliases(data, maxValuesBytes); err != nil {
				return nil, secretValues, read, fmt.Errorf("%s: %s key %q: its YAML aliases expand the values past %d MiB, the most one Sync may have",
					field, obj, key, maxValuesBytes>>20)
			}
			doc := map[string]any{}
			if err := yaml.Unmarshal(data, &doc); err != nil {
				return nil, secretValues, read, fmt.Errorf("%s: %s key %q: %w", field, obj, key, valuesYAMLError(err, secret))
			}
			if secret {
				secretValues = sources.AppendLeaves(secretValues, doc)
			}
			vals = sources.MergeValues(vals, doc)
		}
		// What the values hold, not only what was read: a targetPath's list indexes make
		// slots of their own.
		if sources.ValuesSize(vals, maxValuesBytes) > maxValuesBytes {
			return nil, secretValues, read, fmt.Errorf("%s: the Helm values pass %d MiB, the most one Sync may have", field, maxValuesBytes>>20)
		}
	}
	return vals, secretValues, read, nil
}

// valuesKey reads key of the ConfigMap (data, then binaryData) or Secret name of s's
// namespace, as s's user.
func (r *reconciler) valuesKey(ctx context.Context, s *v1alpha1.Sync, kind, name, key string) (data []byte, found bool, err error) {
	switch kind {
	case "ConfigMap":
		var cm *corev1.ConfigMap
		if cm, err = r.engines.configMap(ctx, s, name); err != nil {
			return nil, false, err
		}
		if v, ok := cm.Data[key]; ok {
			return []byte(v), true, nil
		}
		data, found = cm.BinaryData[key]
		return data, found, nil
	case "Secret":
		var sec *corev1.Secret
		if sec, err = r.engines.secret(ctx, s, name); err != nil {
			return nil, false, err
		}
		data, found = sec.Data[key]
		return data, found, nil
	}
	// The schema refuses other kinds; an older schema may have let one in.
	return nil, false, fmt.Errorf("kind %q: want ConfigMap or Secret", kind)
}

// yamlLine finds the line a YAML parser's message names.
var yamlLine = regexp.MustCompile(`\bline (\d+)\b`)

// valuesYAMLError is the error for a key whose content is not a YAML mapping. For a
// Secret's key, the parser's message is withheld (its "cannot unmarshal !!str `…`" quotes
// the content); the line it names is kept.
func valuesYAMLError(err error, secret bool) error {
	if !secret {
		return fmt.Errorf("not a YAML mapping of values: %w", err)
	}
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		return fmt.Errorf("not a YAML mapping of values (line %s; the parser's message is withheld: it would quote the Secret)", m[1])
	}
	return fmt.Errorf("not a YAML mapping of values (the parser's message is withheld: it would quote the Secret)")
}
