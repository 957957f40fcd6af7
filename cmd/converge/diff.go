package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/converge-dev/converge/cmd/converge/daemon"
	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/inventory"
)

const diffLong = `Diff renders a Sync's own source at the revision it last applied (status.lastAppliedRevision;
the head of its spec.source.git.ref when it applied none) and dry-runs it on the server with
the Sync's inventory and options, as flux diff kustomization does: every object that would be
created or configured (with a unified diff; Secret values masked) and every object that would
be pruned. Nothing is written. It shows drift: what changed in the cluster since the Sync
applied its revision, which its next reconcile corrects. --latest renders the head of the
Sync's ref instead: what its next reconcile would apply and prune (a suspended Sync's pending
commits, for example).

It is the dry-run of converge apply --dry-run --diff --inventory on the Sync's inventory, run
with the kubeconfig's credentials (a secretRef of the source is read with them too), and
prints the same report: lines for people, or -o json|yaml|markdown. The git URL is the Sync
author's: a file:// URL or one on this machine or its link is refused, as the daemon refuses
it, unless --allow-local-git.

The CLI renders git sources; a Sync with spec.source.helm, oci or helmRepository, spec.postBuild
or spec.decryption is refused with how to render it by hand.

Exit codes, as converge apply --dry-run and kubectl diff: 0 no difference; 1 differences found;
2 an error (a Sync that does not exist included, so that 1 always means differences).`

// diffOptions are the flags of `converge diff`.
type diffOptions struct {
	kube       *kubeFlags
	allowLocal bool
	latest     bool
	output     string
}

func newDiffCommand(kube *kubeFlags) *cobra.Command {
	o := &diffOptions{kube: kube}
	cmd := &cobra.Command{
		Use:   "diff SYNC",
		Short: "Show how the cluster differs from a Sync's revision (a server-side dry-run; exit 1 on differences)",
		Long:  diffLong,
		Example: `  converge diff -n apps web
  converge diff -n apps web -o json | jq '.summary'
  converge diff -n apps web --latest   # what the next reconcile would change`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeSyncNames(kube, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			err := o.run(cmd, args[0])
			// Only "differences found" exits 1; a missing Sync is an error here (2).
			var ee *exitError
			if errors.As(err, &ee) && ee.err != errChangesFound {
				return &exitError{code: exitCodeError, err: ee.err}
			}
			return err
		},
	}
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "output format: json, yaml or markdown (default: lines for people)")
	addAllowLocalGitFlag(cmd, &o.allowLocal)
	cmd.Flags().BoolVar(&o.latest, "latest", false, "render the head of spec.source.git.ref instead of the last applied revision: what the next reconcile applies")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(
		[]cobra.Completion{"json", "yaml", "markdown"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// run renders and dry-runs the Sync name of -n's namespace and prints the report.
func (o *diffOptions) run(cmd *cobra.Command, name string) error {
	switch o.output {
	case "", "table", "json", "yaml", "markdown":
	default:
		return fmt.Errorf("--output %q: want json, yaml or markdown", o.output)
	}
	ctx := cmd.Context()
	_, s, err := readSync(ctx, o.kube, name)
	if err != nil {
		return err
	}
	c, eng, err := o.kube.clientAndEngine()
	if err != nil {
		return err
	}
	bundle, err := loadSyncSource(ctx, c, s, o.allowLocal, o.latest)
	if err != nil {
		return err
	}
	res, applyErr := dryRunSync(ctx, eng, daemon.ApplyOptions(s), daemon.InventoryRef(s), bundle.Objects, bundle.Origins)
	rep := newReport(bundle.Revision, true, res, applyErr)
	rep.color = (o.output == "" || o.output == "table") && isTerminal(cmd.OutOrStdout())
	format := o.output
	if format == "table" {
		format = ""
	}
	if applyErr == nil || !rep.empty() || format != "" {
		if err := rep.write(cmd.OutOrStdout(), format); err != nil {
			return err
		}
	}
	switch {
	case applyErr != nil:
		return explain(applyErr, res)
	case rep.Summary.changes() > 0:
		return &exitError{code: exitCodeChanges, err: errChangesFound}
	}
	return nil
}

// dryRunSync is the dry-run of converge apply --dry-run --diff --inventory ref with the Sync's
// options opts: a legacy inventory is read as its migration would leave it, nothing is
// written, nothing waited for.
func dryRunSync(ctx context.Context, eng *engine.Engine, opts engine.ApplyOptions, ref inventory.Ref,
	objs []*unstructured.Unstructured, origins []string) (*engine.Result, error) {
	mopts := inventory.DefaultMigrateOptions()
	mopts.DryRun = true
	ref, err := eng.Migrate(ctx, ref, mopts)
	if err != nil {
		return nil, err
	}
	opts.DryRun, opts.Diff, opts.Wait, opts.CheckOnce = true, true, false, false
	return eng.Apply(ctx, engine.Set{Inventory: ref, Objects: objs, Origins: origins}, opts)
}
