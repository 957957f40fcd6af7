package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/inventory"
)

// Exit codes of "converge apply", as kubectl diff and flux diff.
const (
	exitCodeChanges = 1 // --dry-run found changes
	exitCodeError   = 2
)

// applyFlags are the flags of "converge apply" besides the source flags.
type applyFlags struct {
	src         sourceFlags
	dryRun      bool
	diff        bool
	prune       bool
	inventory   string
	wait        bool
	timeout     time.Duration
	force       bool
	forceConfl  bool
	allowEmpty  bool
	pruneBudget int
	output      string
}

func newApplyCommand(kube *kubeFlags) *cobra.Command {
	var f applyFlags
	cmd := &cobra.Command{
		Use:   "apply [PATH]",
		Short: "Apply (or --dry-run) a kustomization, YAML folder or git path with the daemon's engine",
		Long: `Apply renders PATH (or --git-url/--path) like "converge build" and applies it with
server-side apply through the same engine as the daemon: CRDs and Namespaces first, a
write-ahead inventory, and with --prune the deletion of what left the set.

With --dry-run nothing is written: every object is dry-run on the server, and the output says
what would be created, configured (with --diff, a unified diff; Secret values masked), left
unchanged and pruned.

The inventory (--inventory NAMESPACE/NAME) records what the set owns; --prune needs it. Without
it the inventory is NAMESPACE/converge-cli-<folder name> in the -n namespace.

Exit codes: 0 nothing to change (dry-run) or applied cleanly; 1 changes found (dry-run only);
2 an error (bad input, an object failed, the API server refused).`,
		Example: `  # What would change? (exit 1 when something would)
  converge apply ./overlays/prod --dry-run --diff

  # Apply and prune, waiting for readiness
  converge apply ./overlays/prod --prune --inventory apps/prod --wait

  # A git path, as a pull-request comment
  converge apply --git-url https://github.com/org/apps.git --ref main --path deploy --dry-run -o markdown`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.run(cmd, kube, args)
		},
	}
	f.src.addFlags(cmd)
	fl := cmd.Flags()
	fl.BoolVar(&f.dryRun, "dry-run", false, "server-side dry-run: show what would change, write nothing")
	fl.BoolVar(&f.diff, "diff", false, "print a unified diff of every changed object")
	fl.BoolVar(&f.prune, "prune", false, "delete objects of the inventory that left the set")
	fl.StringVar(&f.inventory, "inventory", "", "NAMESPACE/NAME of the set's inventory ConfigMap (required with --prune)")
	fl.BoolVar(&f.wait, "wait", false, "wait until every applied object is Current (kstatus)")
	fl.DurationVar(&f.timeout, "timeout", 5*time.Minute, "readiness and CRD wait timeout")
	fl.BoolVar(&f.force, "force", false, "recreate objects whose immutable fields changed")
	fl.BoolVar(&f.forceConfl, "force-conflicts", false, "take fields owned by other server-side apply managers")
	fl.BoolVar(&f.allowEmpty, "allow-empty", false, "let an empty set prune everything in the inventory")
	fl.IntVar(&f.pruneBudget, "prune-budget", 0, "refuse to prune more than this many objects (0: no limit)")
	fl.StringVarP(&f.output, "output", "o", "", "output format: json, yaml or markdown (default: lines for people)")
	return cmd
}

func (f *applyFlags) run(cmd *cobra.Command, kube *kubeFlags, args []string) error {
	if err := f.validate(); err != nil {
		return &exitError{code: exitCodeError, err: err}
	}
	ns := kube.namespace()
	ref, err := f.inventoryRef(ns, args)
	if err != nil {
		return &exitError{code: exitCodeError, err: err}
	}
	bundle, err := f.src.load(cmd.Context(), args)
	if err != nil {
		return &exitError{code: exitCodeError, err: err}
	}
	_, eng, err := kube.clients(true)
	if err != nil {
		return &exitError{code: exitCodeError, err: err}
	}
	opts := engine.DefaultApplyOptions()
	opts.DryRun, opts.Diff, opts.Prune, opts.Wait, opts.Timeout = f.dryRun, f.diff, f.prune, f.wait, f.timeout
	opts.Force, opts.ForceConflicts, opts.AllowEmpty, opts.PruneBudget = f.force, f.forceConfl, f.allowEmpty, f.pruneBudget
	opts.DefaultNamespace = ns
	res, applyErr := eng.Apply(cmd.Context(), engine.Set{Inventory: ref, Objects: bundle.Objects}, opts)
	rep := newReport(bundle.Revision, f.dryRun, res, applyErr)
	if !f.diff {
		rep.dropDiffs()
	}
	rep.color = f.output == "" && isTerminal(cmd.OutOrStdout())
	if err := rep.write(cmd.OutOrStdout(), f.output); err != nil {
		return &exitError{code: exitCodeError, err: err}
	}
	switch {
	case applyErr != nil:
		return &exitError{code: exitCodeError, err: applyErr}
	case f.dryRun && rep.Summary.changes() > 0:
		return &exitError{code: exitCodeChanges, err: errChangesFound}
	}
	return nil
}

// errChangesFound is the "error" of a dry-run that found changes: exit code 1, no message.
var errChangesFound = errors.New("changes found")

func (f *applyFlags) validate() error {
	switch f.output {
	case "", "json", "yaml", "markdown":
	default:
		return fmt.Errorf("--output %q: want json, yaml or markdown", f.output)
	}
	if f.prune && f.inventory == "" {
		return errors.New("--prune needs --inventory NAMESPACE/NAME: pruning must know exactly which set it prunes")
	}
	return nil
}

var labelUnsafe = regexp.MustCompile(`[^a-z0-9-]+`)

// inventoryRef is --inventory, or NAMESPACE/converge-cli-<folder name>.
func (f *applyFlags) inventoryRef(ns string, args []string) (inventory.Ref, error) {
	if f.inventory != "" {
		invNS, name, ok := strings.Cut(f.inventory, "/")
		if !ok || invNS == "" || name == "" {
			return inventory.Ref{}, fmt.Errorf("--inventory %q: want NAMESPACE/NAME", f.inventory)
		}
		return inventory.Ref{Namespace: invNS, Name: name, ID: invNS + "_" + name}, nil
	}
	base := f.src.path
	if f.src.gitURL == "" && len(args) == 1 {
		if abs, err := filepath.Abs(args[0]); err == nil {
			base = abs
		}
	}
	name := strings.Trim(labelUnsafe.ReplaceAllString(strings.ToLower(filepath.Base(base)), "-"), "-")
	if name == "" {
		name = "default"
	}
	name = "converge-cli-" + name
	if len(name) > 50 {
		name = name[:50]
	}
	return inventory.Ref{Namespace: ns, Name: name, ID: ns + "_" + name}, nil
}
