package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
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
	installNamespace = "converge-system"
	installName      = "converge-install"
	daemonName       = "converge" // the Deployment of the base
	baseImage        = "ghcr.io/converge-dev/converge"
	syncCRDName      = "syncs.converge.dev"
)

// installRef is the inventory of what "converge install" applied, in the install's own ID
// namespace (no Sync or "converge apply --inventory" can share it); Legacy is the ID of
// earlier versions, taken over by the engine's Migrate.
var installRef = inventory.Ref{Namespace: installNamespace, Name: installName,
	ID:     inventory.ID(inventory.OwnerInstall, installNamespace, installName),
	Legacy: inventory.LegacyID(installNamespace, installName)}

// installFlags are the flags of "converge install".
type installFlags struct {
	dryRun  bool
	diff    bool
	image   string
	wait    bool
	timeout time.Duration
	output  string
}

func newInstallCommand(kube *kubeFlags) *cobra.Command {
	var f installFlags
	cmd := &cobra.Command{
		Use:   "install",
		Short: "Install or upgrade the daemon in the cluster (the deploy/ base built into this binary)",
		Long: `Install renders the deploy/ kustomize base built into this binary (namespace
converge-system, the Sync CRD, least-privilege RBAC, the Deployment and its metrics Service)
and applies it with the same engine as "converge apply": server-side apply, an inventory
(converge-system/converge-install), pruning of objects a newer base no longer has, and a
readiness wait. Running it again with a newer binary is the upgrade.

The daemon may apply no kind until you grant it: see deploy/examples/apply-rbac and
docs/deploy.md. "kubectl apply -k deploy/" installs the same objects without an inventory.`,
		Example: `  # What would be installed or changed? Nothing is written.
  converge install --dry-run --diff

  # Install (or upgrade) with a released image
  converge install --image ghcr.io/converge-dev/converge:v0.1.0`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return f.run(cmd, kube) },
	}
	fl := cmd.Flags()
	fl.BoolVar(&f.dryRun, "dry-run", false, "server-side dry-run: show what would change, write nothing")
	fl.BoolVar(&f.diff, "diff", false, "print a unified diff of every changed object")
	fl.StringVar(&f.image, "image", "", "daemon image (default: the base's "+baseImage+":latest)")
	fl.BoolVar(&f.wait, "wait", true, "wait until every object is ready (the Deployment Available)")
	fl.DurationVar(&f.timeout, "timeout", 5*time.Minute, "readiness wait timeout")
	fl.StringVarP(&f.output, "output", "o", "", "output format: json, yaml or markdown (default: lines for people)")
	return cmd
}

func (f *installFlags) run(cmd *cobra.Command, kube *kubeFlags) error {
	switch f.output {
	case "", "json", "yaml", "markdown":
	default:
		return &exitError{code: exitCodeError, err: fmt.Errorf("--output %q: want json, yaml or markdown", f.output)}
	}
	ctx := cmd.Context()
	objs, err := renderBase(ctx, f.image)
	if err != nil {
		return &exitError{code: exitCodeError, err: err}
	}
	c, eng, err := kube.clientAndEngine()
	if err != nil {
		return &exitError{code: exitCodeError, err: err}
	}
	created := false
	if !f.dryRun {
		// The inventory lives in converge-system, and the engine writes it ahead of the
		// first apply: the namespace must exist first.
		if created, err = ensureInstallNamespace(ctx, c, objs); err != nil {
			return &exitError{code: exitCodeError, err: err}
		}
	}
	opts := engine.DefaultApplyOptions()
	opts.DryRun, opts.Diff, opts.Wait, opts.Timeout = f.dryRun, f.diff, f.wait, f.timeout
	opts.DefaultNamespace = installNamespace
	mopts := inventory.DefaultMigrateOptions()
	mopts.DryRun = f.dryRun
	ref, err := eng.Migrate(ctx, installRef, mopts)
	if err != nil {
		return &exitError{code: exitCodeError, err: err}
	}
	res, applyErr := eng.Apply(ctx, engine.Set{Inventory: ref, Objects: objs}, opts)
	if created {
		setAction(res.Changes, "Namespace", "", installNamespace, engine.ActionCreated, "")
	}
	rep := newReport(baseRevision(), f.dryRun, res, applyErr)
	if !f.diff {
		rep.dropDiffs()
	}
	if err := rep.write(cmd.OutOrStdout(), f.output); err != nil {
		return &exitError{code: exitCodeError, err: err}
	}
	if applyErr != nil {
		return &exitError{code: exitCodeError, err: applyErr}
	}
	return nil
}

// baseRevision names the embedded base in reports.
func baseRevision() string { return "deploy/ of converge " + version }

// renderBase builds the embedded deploy/ base with kustomize (through sources.Render, which
// serializes kustomize builds) and sets the daemon image when image is not empty.
func renderBase(ctx context.Context, image string) ([]*unstructured.Unstructured, error) {
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
		return fmt.Errorf("--image %q: want an image reference such as %s:v0.1.0", image, baseImage)
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
				if ref, _ := m["image"].(string); imageName(ref) == baseImage {
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
		return fmt.Errorf("--image: no container of the deploy base runs %s", baseImage)
	}
	return nil
}

// imageName is ref without its tag and digest.
func imageName(ref string) string {
	if i := strings.Index(ref, "@"); i >= 0 {
		ref = ref[:i]
	}
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref = ref[:i]
	}
	return ref
}

// ensureInstallNamespace server-side applies the base's Namespace, as the engine would
// (field manager, owner annotation), when it does not exist yet. It reports whether it
// created it.
func ensureInstallNamespace(ctx context.Context, c client.Client, objs []*unstructured.Unstructured) (bool, error) {
	err := c.Get(ctx, client.ObjectKey{Name: installNamespace}, &corev1.Namespace{})
	switch {
	case err == nil:
		return false, nil
	case !apierrors.IsNotFound(err):
		return false, fmt.Errorf("namespace %s: %w", installNamespace, err)
	}
	ns, err := baseNamespace(objs)
	if err != nil {
		return false, err
	}
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(ns), client.FieldOwner(engine.FieldManager)); err != nil {
		return false, fmt.Errorf("namespace %s: apply: %w", installNamespace, err)
	}
	return true, nil
}

// baseNamespace is a copy of the base's Namespace as the engine applies it: with the
// install's owner annotation.
func baseNamespace(objs []*unstructured.Unstructured) (*unstructured.Unstructured, error) {
	for _, o := range objs {
		if o.GetKind() == "Namespace" && o.GetName() == installNamespace {
			ns := o.DeepCopy()
			setAnnotation(ns, engine.OwnerAnnotation, installRef.ID)
			return ns, nil
		}
	}
	return nil, fmt.Errorf("deploy base: no Namespace %s", installNamespace)
}

func setAnnotation(u *unstructured.Unstructured, key, value string) {
	ann := u.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[key] = value
	u.SetAnnotations(ann)
}

// setAction overrides what a report says about one object, when this command did more than
// the engine saw (it created the namespace the inventory lives in, or deleted it last).
func setAction(changes []engine.Change, kind, namespace, name string, action engine.Action, msg string) {
	for i, c := range changes {
		if c.Object.GroupKind.Kind == kind && c.Object.Namespace == namespace && c.Object.Name == name {
			changes[i].Action, changes[i].Message, changes[i].Err = action, msg, nil
		}
	}
}
