package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/inventory"
	"github.com/converge-dev/converge/sources"
)

// Exit codes of "converge apply", as kubectl diff and flux diff.
const (
	exitCodeChanges = 1 // --dry-run found changes
	exitCodeError   = 2
)

// applyFlags are the flags of "converge apply" besides the source flags.
type applyFlags struct {
	src         sourceFlags
	health      healthFlags
	dryRun      bool
	diff        bool
	prune       bool
	inventory   string
	wait        bool
	timeout     time.Duration
	force       bool
	forceConfl  bool
	adopt       bool
	takeOver    []string
	createNs    bool
	allowEmpty  bool
	pruneBudget int
	fieldMgr    string
	output      string
	ignoreFile  string
}

// applyLong is the long help of "converge apply".
const applyLong = `Apply renders PATH (or --git-url/--path) like "converge build" and applies it with
server-side apply through the same engine as the daemon: CRDs and Namespaces first, a
write-ahead inventory, and with --prune the deletion of what left the set.

With --dry-run nothing is written: every object is dry-run on the server, and the output says
what would be created, configured (with --diff, a unified diff; Secret values masked), left
unchanged and pruned.

SOPS-encrypted objects are decrypted in memory with --decryption-key-file (an age identity
file, repeatable); without it an encrypted object is refused, naming it and its file.

The inventory (--inventory NAMESPACE/NAME, or NAME in -n's namespace; a ConfigMap) records
which objects the set owns: an object another inventory owns (a Sync, another "converge apply
--inventory", "converge install") is never taken over, and --prune deletes only what this inventory owns. A real apply
needs --inventory: name it after the application and environment (apps/prod), not after a
folder, and use the same name on every run. A --dry-run without --inventory is a plain diff
against the live objects: nothing is owned or pruned, and each object's current owner is
shown as information, never as an error. A --dry-run with --inventory also shows what would
be pruned and fails objects another inventory owns, as the apply would. A set that holds a
ConfigMap of the inventory's own name is refused before anything is written. When the
inventory's namespace does not exist, a set that declares that Namespace creates it (owned by
the set); otherwise --create-namespace creates it.

A path that renders no objects is refused unless --prune --allow-empty: then every object of
the inventory is pruned (--prune-budget and --dry-run apply). "converge delete --inventory"
deletes a set and its inventory; "converge status" lists the inventories.

Fields are applied as the server-side apply field manager --field-manager ("converge", as the
daemon). Another name keeps a CI job's ownership apart from the daemon's; changing it between
runs of one set hands the fields over to the new name, as kubectl apply --field-manager does.

--wait waits for every applied object to be Current (kstatus). --health-check and
--health-check-exprs wait as a Sync's spec.healthChecks and spec.healthCheckExprs do: more
objects to wait for (with or without --wait), and CEL rules that judge a kind's readiness
instead of kstatus; an expression that does not compile fails before anything is applied.

On a terminal, stderr shows how far a long run has come ("applying 120/1000", "pruning 3/10",
"waiting for readiness 40/100") on one line that is erased before the report. Nothing is drawn
when stderr is not a terminal (CI logs, pipes) or with -o json|yaml.

Exit codes: 0 nothing to change (dry-run) or applied cleanly; 1 changes found (dry-run only);
2 an error (bad input, an object failed, the API server refused).`

// applyExample are the examples of "converge apply".
const applyExample = `  # What would change? (exit 1 when something would)
  converge apply ./overlays/prod --dry-run --diff

  # Apply and prune, waiting for readiness (the inventory is a ConfigMap "prod" in "apps")
  converge apply ./overlays/prod --prune --inventory apps/prod --wait

  # A git path, as a pull-request comment
  converge apply --git-url https://github.com/org/apps.git --ref main --path deploy --dry-run -o markdown`

func newApplyCommand(kube *kubeFlags) *cobra.Command {
	var f applyFlags
	cmd := &cobra.Command{
		Use:     "apply [PATH]",
		Short:   "Apply (or --dry-run) a kustomization, YAML folder or git path with the daemon's engine",
		Long:    applyLong,
		Example: applyExample,
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// Secret values of --substitute-from-file and decrypted values never reach
			// the error (run keeps them out of the report).
			if err := f.run(cmd, kube, args); err != nil {
				return f.src.redactor().Error(err)
			}
			return nil
		},
	}
	f.src.addFlags(cmd)
	f.health.addFlags(cmd)
	fl := cmd.Flags()
	fl.BoolVar(&f.dryRun, "dry-run", false, "server-side dry-run: show what would change, write nothing")
	fl.BoolVar(&f.diff, "diff", false, "print a unified diff of every changed object")
	fl.BoolVar(&f.prune, "prune", false, "delete objects of the inventory that left the set")
	fl.StringVar(&f.inventory, "inventory", "", "[NAMESPACE/]NAME of the set's inventory ConfigMap, in -n's namespace without NAMESPACE/ (required unless --dry-run)")
	fl.BoolVar(&f.createNs, "create-namespace", false, "create the inventory's namespace when it does not exist (a namespace the set declares is created without it)")
	fl.BoolVar(&f.wait, "wait", false, "wait until every applied object is Current (kstatus)")
	fl.DurationVar(&f.timeout, "timeout", 5*time.Minute, "readiness and CRD wait timeout")
	fl.BoolVar(&f.force, "force", false, "recreate objects whose immutable fields changed")
	fl.BoolVar(&f.forceConfl, "force-conflicts", false, "take fields owned by other server-side apply managers")
	fl.BoolVar(&f.adopt, "adopt", false, "take over objects without an owner annotation that another tool (Helm, kubectl apply) manages")
	fl.StringSliceVar(&f.takeOver, "take-over-managers", engine.DefaultTakeOverManagers(),
		`field managers (a name, or a prefix ending in "*") whose fields move to --field-manager on the objects applied, so a field removed from the source is removed from the cluster (as a Sync's spec.takeOverManagers; "" for none)`)
	fl.BoolVar(&f.allowEmpty, "allow-empty", false, "with --prune, let a path that renders no objects prune everything in the inventory (as a Sync's spec.allowEmpty)")
	fl.IntVar(&f.pruneBudget, "prune-budget", 0, "refuse to prune more than this many objects (0: no limit)")
	fl.StringVar(&f.fieldMgr, "field-manager", engine.FieldManager, "server-side apply field manager that owns the applied fields")
	fl.StringVarP(&f.output, "output", "o", "", "output format: json, yaml or markdown (default: lines for people)")
	fl.StringVar(&f.ignoreFile, "ignore-rules", "", "YAML file of fields to leave alone, the entries of a Sync's spec.ignore ({paths, managers, target})")
	return cmd
}

func (f *applyFlags) run(cmd *cobra.Command, kube *kubeFlags, args []string) error {
	fail := func(err error) error { return &exitError{code: exitCodeError, err: err} }
	if err := f.validate(); err != nil {
		return fail(err)
	}
	ns := kube.namespace()
	ref, err := f.inventoryRef(ns)
	if err != nil {
		return fail(err)
	}
	checks, exprs, err := f.health.options(ns)
	if err != nil {
		return fail(err)
	}
	ignore, err := readIgnoreRules(f.ignoreFile)
	if err != nil {
		return fail(err)
	}
	f.src.helm.namespace = ns // a chart's release namespace is -n's
	f.src.helm.clusterVersion = kube.serverVersion
	f.src.stdin = cmd.InOrStdin()
	bundle, err := f.src.load(cmd.Context(), args)
	if err = f.emptySet(bundle, err); err != nil {
		return fail(err)
	}
	c, eng, err := kube.clientAndEngine()
	if err != nil {
		return fail(err)
	}
	if ref != (inventory.Ref{}) {
		mopts := inventory.DefaultMigrateOptions()
		mopts.DryRun, mopts.FieldManager = f.dryRun, f.fieldMgr
		if ref, err = eng.Migrate(cmd.Context(), ref, mopts); err != nil {
			return fail(explain(err, nil))
		}
	}
	opts := engine.DefaultApplyOptions()
	opts.DryRun, opts.Diff, opts.Prune, opts.Wait, opts.Timeout = f.dryRun, f.diff, f.prune, f.wait, f.timeout
	opts.Force, opts.ForceConflicts, opts.AllowEmpty, opts.PruneBudget = f.force, f.forceConfl, f.allowEmpty, f.pruneBudget
	opts.DefaultNamespace, opts.FieldManager = ns, f.fieldMgr
	opts.Adopt, opts.HealthChecks, opts.HealthExprs, opts.Ignore = f.adopt, checks, exprs, ignore
	opts.TakeOverManagers = f.takeOver
	line := newProgressLine(cmd.ErrOrStderr(), showProgress(cmd.ErrOrStderr(), f.output))
	if line != nil {
		opts.Progress = line.update
	}
	res, applyErr := f.apply(cmd.Context(), c, eng, engine.Set{Inventory: ref, Objects: bundle.Objects, Origins: bundle.Origins}, bundle, opts)
	line.clear()
	if res != nil && res.MigrationPending != "" {
		fmt.Fprintln(cmd.ErrOrStderr(), "warning: "+res.MigrationPending)
	}
	for _, u := range ignoreUnmatched(res) {
		fmt.Fprintln(cmd.ErrOrStderr(), "warning: --ignore-rules: "+u)
	}
	rep := newReport(bundle.Revision, f.dryRun, res, applyErr)
	if !f.diff {
		rep.dropDiffs()
	}
	f.src.decryption.withholdDiffs(rep, bundle)
	hide := f.src.redactor()
	rep.redact(hide.String)
	rep.color = f.output == "" && isTerminal(cmd.OutOrStdout())
	// A run that failed before it reached any object (no cluster, a refused prune) has no
	// lines for people, only the error; machines and pull-request comments still get a report.
	if applyErr == nil || !rep.empty() || f.output != "" {
		var out bytes.Buffer
		if err := rep.write(&out, f.output); err != nil {
			return fail(err)
		}
		if _, err := io.WriteString(cmd.OutOrStdout(), hide.String(out.String())); err != nil {
			return fail(err)
		}
	}
	return f.exit(cmd.Context(), eng, ref, res, rep, applyErr)
}

// exit is what the apply ends with: the error of a failed run, with how to repair an
// inventory named after an object of the set or written over by it; exit code 1 for a
// dry-run that found changes; nil otherwise.
func (f *applyFlags) exit(ctx context.Context, eng *engine.Engine, ref inventory.Ref, res *engine.Result, rep *report, applyErr error) error {
	fail := func(err error) error { return &exitError{code: exitCodeError, err: err} }
	switch {
	case errors.Is(applyErr, engine.ErrInventoryInSet):
		msg := fmt.Sprintf("; here, for example --inventory %s/%s-set", ref.Namespace, ref.Name)
		if _, err := eng.Inventory(ctx, ref); inventory.IsOverwritten(err) {
			msg += fmt.Sprintf("; an earlier run already wrote the set's ConfigMap over the inventory %s: %s", ref, releaseHint(ref))
		}
		return fail(fmt.Errorf("%w%s", applyErr, msg))
	case inventory.IsOverwritten(applyErr):
		return fail(fmt.Errorf("%w; nothing was written: %s", applyErr, releaseHint(ref)))
	case applyErr != nil:
		return fail(explain(applyErr, res))
	case f.dryRun && rep.Summary.changes() > 0:
		return &exitError{code: exitCodeChanges, err: errChangesFound}
	}
	return nil
}

// apply applies set. When the write-ahead inventory was refused because its namespace does
// not exist (nothing was written yet), it creates the namespace if the set declares it or
// --create-namespace asks, and applies again.
func (f *applyFlags) apply(ctx context.Context, c client.Client, eng *engine.Engine, set engine.Set, bundle *sources.Bundle,
	opts engine.ApplyOptions) (*engine.Result, error) {
	res, err := eng.Apply(ctx, set, opts)
	if f.dryRun || !missingNamespace(err, set.Inventory.Namespace) {
		return res, err
	}
	if err := f.createNamespace(ctx, c, set.Inventory, bundle); err != nil {
		return res, err
	}
	return eng.Apply(ctx, set, opts)
}

// emptySet lets a render of no objects through (the load error err, ErrEmptyRender, and its
// bundle) when --prune --allow-empty ask to prune the whole set, as a Sync's spec.allowEmpty
// does; otherwise it says which flags would. Other errors are returned as they are.
func (f *applyFlags) emptySet(bundle *sources.Bundle, err error) error {
	if !errors.Is(err, sources.ErrEmptyRender) || bundle == nil {
		return err
	}
	if f.prune && f.allowEmpty {
		return nil
	}
	return fmt.Errorf("%w: an empty set applies nothing; --prune --allow-empty deletes every object of the "+
		"inventory (add --dry-run to see them first; converge delete --inventory also deletes the inventory)", err)
}

// releaseHint says how to recover the objects of an inventory overwritten by its own set's
// ConfigMap (inventory.OverwrittenError), which no apply under its name may read.
func releaseHint(ref inventory.Ref) string {
	return fmt.Sprintf("release the objects it owns with converge delete --inventory %s --cascade=orphan "+
		"(the ConfigMap goes with it), then apply under another inventory name", ref)
}

// errChangesFound is the "error" of a dry-run that found changes: exit code 1, no message.
var errChangesFound = errors.New("changes found")

func (f *applyFlags) validate() error {
	switch f.output {
	case "", "json", "yaml", "markdown":
	default:
		return fmt.Errorf("--output %q: want json, yaml or markdown", f.output)
	}
	if f.inventory == "" && !f.dryRun {
		return errors.New("converge apply needs --inventory NAMESPACE/NAME (for example apps/prod): the inventory " +
			"records which objects this set owns, so no other set can take them over or prune them; " +
			"without it only --dry-run runs (a plain diff)")
	}
	return nil
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
	var st apierrors.APIStatus
	if errors.As(err, &st) && apierrors.IsNotFound(err) {
		if d := st.Status().Details; d != nil && d.Kind == "namespaces" && d.Name != "" {
			return fmt.Sprintf("namespace %s does not exist: declare it in the set (a Namespace object), create it "+
				"(kubectl create namespace %s) or, for the inventory's namespace, pass --create-namespace", d.Name, d.Name)
		}
	}
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
