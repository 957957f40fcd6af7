package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/converge-dev/converge/cmd/converge/internal/installer"
	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/inventory"
)

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
		Example: `  # What would be installed or changed? Nothing is written; exit code 1 when something would change.
  converge install --dry-run --diff

  # Install (or upgrade) with a released image
  converge install --image ghcr.io/converge-dev/converge:v0.1.0`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return f.run(cmd, kube) },
	}
	fl := cmd.Flags()
	fl.BoolVar(&f.dryRun, "dry-run", false, "server-side dry-run: show what would change, write nothing")
	fl.BoolVar(&f.diff, "diff", false, "print a unified diff of every changed object")
	fl.StringVar(&f.image, "image", "", "daemon image (default: "+installer.BaseImage+" at this binary's release version, :latest for a development build)")
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
	image := f.image
	if image == "" {
		image = installer.DefaultImage(version)
	}
	objs, err := installer.RenderBase(ctx, image)
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
		if created, err = installer.EnsureNamespace(ctx, c, objs); err != nil {
			return &exitError{code: exitCodeError, err: err}
		}
	}
	opts := engine.DefaultApplyOptions()
	opts.DryRun, opts.Diff, opts.Wait, opts.Timeout = f.dryRun, f.diff, f.wait, f.timeout
	opts.DefaultNamespace = installer.Namespace
	mopts := inventory.DefaultMigrateOptions()
	mopts.DryRun = f.dryRun
	ref, err := eng.Migrate(ctx, installer.Ref, mopts)
	if err != nil {
		return &exitError{code: exitCodeError, err: err}
	}
	res, applyErr := eng.Apply(ctx, engine.Set{Inventory: ref, Objects: objs}, opts)
	if created {
		installer.SetAction(res.Changes, "Namespace", "", installer.Namespace, engine.ActionCreated, "")
	}
	rep := newReport(baseRevision(), f.dryRun, res, applyErr)
	if !f.diff {
		rep.dropDiffs()
	}
	if err := rep.write(cmd.OutOrStdout(), f.output); err != nil {
		return &exitError{code: exitCodeError, err: err}
	}
	switch {
	case applyErr != nil:
		return &exitError{code: exitCodeError, err: explain(applyErr, res)}
	case f.dryRun && rep.Summary.changes() > 0:
		// As "converge apply --dry-run" and "kubectl diff": 1 when something would change.
		return &exitError{code: exitCodeChanges, err: errChangesFound}
	}
	return nil
}

// baseRevision names the embedded base in reports.
func baseRevision() string { return "deploy/ of converge " + version }
