package daemon

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/converge-dev/converge/sources/pipeline"
	"github.com/converge-dev/converge/sources/varsubst"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// substitution is s's spec.postBuild, or nil without one: the variables of
// spec.postBuild.substituteFrom (substituteFrom), then those of spec.postBuild.substitute,
// a later one winning, bounded as a render is (--max-file-size per object,
// --max-total-size in all; zero: the defaults).
func (r *reconciler) substitution(s *v1alpha1.Sync) *pipeline.Substitution {
	pb := s.Spec.PostBuild
	if pb == nil {
		return nil
	}
	return &pipeline.Substitution{
		Variables: func(ctx context.Context) ([]varsubst.Source, error) {
			srcs, err := r.substituteFrom(ctx, s)
			if err != nil {
				return srcs, err
			}
			return append(srcs, varsubst.Source{Name: "spec.postBuild.substitute", Values: pb.Substitute}), nil
		},
		Strict:        pb.Strict,
		MaxObjectSize: r.render.limits.MaxFileSize,
		MaxTotalSize:  r.render.limits.MaxTotalSize,
		Setting:       "spec.postBuild",
	}
}

// substituteFrom reads the ConfigMaps and Secrets of spec.postBuild.substituteFrom as the
// user s acts as (I13: naming a Secret in a Sync must not let a tenant read what it could
// not read itself), in order; a Secret's source is Sensitive. An optional object that does
// not exist is skipped; any other failure, including a refused read of an optional one, is
// an error naming the entry, the object and the identity, returned with what was read
// before it (to be redacted).
func (r *reconciler) substituteFrom(ctx context.Context, s *v1alpha1.Sync) ([]varsubst.Source, error) {
	var srcs []varsubst.Source
	for i, ref := range s.Spec.PostBuild.SubstituteFrom {
		src := varsubst.Source{Name: fmt.Sprintf("%s %s/%s", ref.Kind, s.Namespace, ref.Name)}
		var readErr error
		switch ref.Kind {
		case "ConfigMap":
			var cm *corev1.ConfigMap
			if cm, readErr = r.engines.configMap(ctx, s, ref.Name); readErr == nil {
				src.Values = cm.Data
			}
		case "Secret":
			var sec *corev1.Secret
			if sec, readErr = r.engines.secret(ctx, s, ref.Name); readErr == nil {
				src.Values, src.Sensitive = make(map[string]string, len(sec.Data)), true
				for k, v := range sec.Data {
					src.Values[k] = string(v)
				}
			}
		default: // the schema refuses other kinds; an older schema may have let one in
			readErr = fmt.Errorf("kind %q: want ConfigMap or Secret", ref.Kind)
		}
		if ref.Optional && apierrors.IsNotFound(readErr) {
			continue
		}
		if readErr != nil {
			return srcs, fmt.Errorf("spec.postBuild.substituteFrom[%d]: %s read as %s: %w",
				i, src.Name, r.engines.identity(s), readErr)
		}
		srcs = append(srcs, src)
	}
	return srcs, nil
}

// configMap reads ConfigMap name of s's namespace from the API server as the user s acts
// as, as secret does for Secrets.
func (e *engineSet) configMap(ctx context.Context, s *v1alpha1.Sync, name string) (*corev1.ConfigMap, error) {
	a, err := e.actorFor(s)
	if err != nil {
		return nil, err
	}
	return a.secrets.ConfigMaps(s.Namespace).Get(ctx, name, metav1.GetOptions{})
}
