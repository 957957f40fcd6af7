package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"

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
	fieldMgr    string
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

Fields are applied as the server-side apply field manager --field-manager ("converge", as the
daemon). Another name keeps a CI job's ownership apart from the daemon's; changing it between
runs of one set hands the fields over to the new name, as kubectl apply --field-manager does.

On a terminal, stderr shows how far a long run has come ("applying 120/1000", "pruning 3/10",
"waiting for readiness 40/100") on one line that is erased before the report. Nothing is drawn
when stderr is not a terminal (CI logs, pipes) or with -o json|yaml.

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
	fl.StringVar(&f.fieldMgr, "field-manager", engine.FieldManager, "server-side apply field manager that owns the applied fields")
	fl.StringVarP(&f.output, "output", "o", "", "output format: json, yaml or markdown (default: lines for people)")
	return cmd
}

func (f *applyFlags) run(cmd *cobra.Command, kube *kubeFlags, args []string) error {
	fail := func(err error) error { return &exitError{code: exitCodeError, err: err} }
	if err := f.validate(); err != nil {
		return fail(err)
	}
	ns := kube.namespace()
	ref, err := f.inventoryRef(ns, args)
	if err != nil {
		return fail(err)
	}
	bundle, err := f.src.load(cmd.Context(), args)
	if err != nil {
		return fail(err)
	}
	_, eng, err := kube.clients(true)
	if err != nil {
		return fail(err)
	}
	opts := engine.DefaultApplyOptions()
	opts.DryRun, opts.Diff, opts.Prune, opts.Wait, opts.Timeout = f.dryRun, f.diff, f.prune, f.wait, f.timeout
	opts.Force, opts.ForceConflicts, opts.AllowEmpty, opts.PruneBudget = f.force, f.forceConfl, f.allowEmpty, f.pruneBudget
	opts.DefaultNamespace, opts.FieldManager = ns, f.fieldMgr
	line := newProgressLine(cmd.ErrOrStderr(), showProgress(cmd.ErrOrStderr(), f.output))
	if line != nil {
		opts.Progress = line.update
	}
	res, applyErr := eng.Apply(cmd.Context(), engine.Set{Inventory: ref, Objects: bundle.Objects, Origins: bundle.Origins}, opts)
	line.clear()
	rep := newReport(bundle.Revision, f.dryRun, res, applyErr)
	if !f.diff {
		rep.dropDiffs()
	}
	rep.color = f.output == "" && isTerminal(cmd.OutOrStdout())
	// A run that failed before it reached any object (no cluster, a refused prune) has no
	// lines for people, only the error; machines and pull-request comments still get a report.
	if applyErr == nil || !rep.empty() || f.output != "" {
		if err := rep.write(cmd.OutOrStdout(), f.output); err != nil {
			return fail(err)
		}
	}
	switch {
	case applyErr != nil:
		return fail(explain(applyErr, res))
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

// explained is an error with the one-line message "converge apply" exits with; it unwraps
// to the engine's error.
type explained struct {
	msg string
	err error
}

func (e *explained) Error() string { return e.msg }
func (e *explained) Unwrap() error { return e.err }

// maxErrors bounds the errors explain spells out; the report has the rest.
const maxErrors = 3

// explain turns the engine's error into the one line "converge apply" exits with. The engine
// joins one error per failed object; those res reports (the report lists them) are counted
// after the first, not repeated. The first error the user can fix outside the manifests
// (the connection, the credentials, a permission) leads, followed by what to do.
func explain(err error, res *engine.Result) error {
	leaves := leafErrors(err)
	lead, hint := 0, ""
	for i, l := range leaves {
		if h := hintFor(l); h != "" {
			lead, hint = i, h
			break
		}
	}
	var uerr *url.Error
	if hint == hintUnreachable && errors.As(leaves[lead], &uerr) {
		// Every object fails the same way: the request that could not be sent says it all.
		return &explained{msg: fmt.Sprintf("cannot reach the cluster (%v); %s", uerr, hint), err: err}
	}
	listed := map[string]bool{}
	if res != nil {
		for _, c := range append(slices.Clip(res.Changes), res.Pruned...) {
			if c.Err != nil {
				listed[c.Err.Error()] = true
			}
		}
	}
	parts, more := []string{oneLine(leaves[lead])}, 0
	for i, l := range leaves {
		switch {
		case i == lead:
		case listed[l.Error()] || len(parts) == maxErrors:
			more++
		default:
			parts = append(parts, oneLine(l))
		}
	}
	if more > 0 {
		parts[0] += fmt.Sprintf(" (and %d more; see the report)", more)
	}
	if hint != "" {
		parts = append(parts, hint)
	}
	return &explained{msg: strings.Join(parts, "; "), err: err}
}

// oneLine is the message of err with its line breaks and runs of spaces folded into one space.
func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }

// leafErrors flattens the errors.Join tree of err into its leaves, in order.
func leafErrors(err error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var leaves []error
	for _, e := range j.Unwrap() {
		if e != nil {
			leaves = append(leaves, leafErrors(e)...)
		}
	}
	if len(leaves) == 0 {
		return []error{err}
	}
	return leaves
}

// What to do about the failures a user can fix outside the manifests.
const (
	hintUnreachable = "check --kubeconfig, --context or KUBECONFIG and that the cluster is running"
	hintCredentials = "the API server rejected the kubeconfig's credentials: log in again or choose another --context"
	hintForbidden   = "the kubeconfig's user lacks this permission: ask for an RBAC grant, " +
		"use a --context or --kubeconfig whose user has it, or leave such objects out of the set"
)

// hintFor says what to do about err, or "" when the manifests or the cluster state are to blame.
func hintFor(err error) string {
	var (
		opErr  *net.OpError
		dnsErr *net.DNSError
		uerr   *url.Error
	)
	switch {
	case apierrors.IsForbidden(err):
		return hintForbidden
	case apierrors.IsUnauthorized(err):
		return hintCredentials
	case errors.As(err, &opErr), errors.As(err, &dnsErr), utilnet.IsConnectionRefused(err),
		errors.As(err, &uerr) && uerr.Timeout():
		return hintUnreachable
	}
	return ""
}
