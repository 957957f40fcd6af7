// Package installer is what "converge install" and "converge uninstall" manage: the
// embedded deploy/ base, tracked by one inventory in the namespace the base creates, and the
// ordered removal of it (daemon first, Syncs released, CRD, namespace last). The CLI verbs
// keep the flags, prompts and reports.
package installer

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/deploy"
	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/inventory"
	"github.com/converge-dev/converge/sources"
)

// What "converge install" manages: the embedded deploy/ base, tracked by one inventory in
// the namespace the base creates.
const (
	Namespace   = "converge-system"
	Name        = "converge-install"
	DaemonName  = "converge" // the Deployment of the base
	BaseImage   = "ghcr.io/converge-dev/converge"
	SyncCRDName = "syncs.converge.dev"
)

// Ref is the inventory of what "converge install" applied, in the install's own ID
// namespace (no Sync or "converge apply --inventory" can share it); Legacy is the ID of
// earlier versions, taken over by the engine's Migrate.
var Ref = inventory.Ref{Namespace: Namespace, Name: Name,
	ID:     inventory.ID(inventory.OwnerInstall, Namespace, Name),
	Legacy: inventory.LegacyID(Namespace, Name)}

// DefaultImage is the daemon image of a CLI of version v: the release of the same version
// (BaseImage:v1.2.3) when v is a release ("v" and a semver), else "" (the base's :latest,
// for development builds, whose version names a commit no registry holds).
func DefaultImage(v string) string {
	if !releaseRE.MatchString(v) {
		return ""
	}
	return BaseImage + ":" + v
}

var releaseRE = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`)

// RenderBase builds the embedded deploy/ base with kustomize (through sources.Render, which
// serializes kustomize builds) and sets the daemon image when image is not empty.
func RenderBase(ctx context.Context, image string) ([]*unstructured.Unstructured, error) {
	dir, err := os.MkdirTemp("", "converge-deploy-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := os.CopyFS(dir, deploy.Base()); err != nil {
		return nil, fmt.Errorf("deploy base: %w", err)
	}
	objs, err := sources.Render(ctx, dir, ".", sources.DefaultRenderOptions())
	if err != nil {
		return nil, fmt.Errorf("deploy base: %w", err)
	}
	if image == "" {
		return objs, nil
	}
	return objs, setImage(objs, image)
}

// setImage replaces the base image in every Deployment container that runs it.
func setImage(objs []*unstructured.Unstructured, image string) error {
	if image == "" || strings.ContainsAny(image, " \t\r\n") {
		return fmt.Errorf("--image %q: want an image reference such as %s:v0.1.0", image, BaseImage)
	}
	n := 0
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		containers, _, err := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		if err != nil {
			return fmt.Errorf("deploy base: Deployment %s: %w", o.GetName(), err)
		}
		for _, c := range containers {
			if m, ok := c.(map[string]any); ok {
				if ref, _ := m["image"].(string); ImageName(ref) == BaseImage {
					m["image"] = image
					n++
				}
			}
		}
		if err := unstructured.SetNestedSlice(o.Object, containers, "spec", "template", "spec", "containers"); err != nil {
			return fmt.Errorf("deploy base: Deployment %s: %w", o.GetName(), err)
		}
	}
	if n == 0 {
		return fmt.Errorf("--image: no container of the deploy base runs %s", BaseImage)
	}
	return nil
}

// ImageName is ref without its tag and digest.
func ImageName(ref string) string {
	if i := strings.Index(ref, "@"); i >= 0 {
		ref = ref[:i]
	}
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref = ref[:i]
	}
	return ref
}

// EnsureNamespace server-side applies the base's Namespace, as the engine would
// (field manager, owner annotation), when it does not exist yet. It reports whether it
// created it.
func EnsureNamespace(ctx context.Context, c client.Client, objs []*unstructured.Unstructured) (bool, error) {
	err := c.Get(ctx, client.ObjectKey{Name: Namespace}, &corev1.Namespace{})
	switch {
	case err == nil:
		return false, nil
	case !apierrors.IsNotFound(err):
		return false, fmt.Errorf("namespace %s: %w", Namespace, err)
	}
	ns, err := baseNamespace(objs)
	if err != nil {
		return false, err
	}
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(ns), client.FieldOwner(engine.FieldManager)); err != nil {
		return false, fmt.Errorf("namespace %s: apply: %w", Namespace, err)
	}
	return true, nil
}

// baseNamespace is a copy of the base's Namespace as the engine applies it: with the
// install's owner annotation.
func baseNamespace(objs []*unstructured.Unstructured) (*unstructured.Unstructured, error) {
	for _, o := range objs {
		if o.GetKind() == "Namespace" && o.GetName() == Namespace {
			ns := o.DeepCopy()
			setAnnotation(ns, engine.OwnerAnnotation, Ref.ID)
			return ns, nil
		}
	}
	return nil, fmt.Errorf("deploy base: no Namespace %s", Namespace)
}

func setAnnotation(u *unstructured.Unstructured, key, value string) {
	ann := u.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[key] = value
	u.SetAnnotations(ann)
}

// SetAction overrides what a report says about one object, when this command did more than
// the engine saw (it created the namespace the inventory lives in, or deleted it last).
func SetAction(changes []engine.Change, kind, namespace, name string, action engine.Action, msg string) {
	for i, c := range changes {
		if c.Object.GroupKind.Kind == kind && c.Object.Namespace == namespace && c.Object.Name == name {
			changes[i].Action, changes[i].Message, changes[i].Err = action, msg, nil
		}
	}
}
