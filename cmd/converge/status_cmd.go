package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
)

// The `status` and `get` verbs list Syncs as `kubectl get` and `flux get kustomizations` do.
// `get` is kubectl's verb and takes a resource type first (`converge get syncs -A`), so a
// kubectl user's command line works unchanged and further types can join it; `status` is its
// short form for Syncs (`converge status -A`). Both run getOptions.run.

// syncTypes are the names `converge get` accepts for Syncs: kubectl's plural, singular,
// short and fully qualified forms.
var syncTypes = []string{"syncs", "sync", "sy", "syncs.converge.dev", "sync.converge.dev"}

// getOptions are the flags of `converge status` and `converge get`, kubectl get's.
type getOptions struct {
	kube *kubeFlags
	// inventories lists the inventories of converge apply after the Syncs (status, in the
	// table layout, without names), as kubectl get lists a second kind in a second table.
	inventories   bool
	print         *genericclioptions.PrintFlags
	allNamespaces bool
	selector      string
	noHeaders     bool
	watch         bool
	watchOnly     bool
}

func (o *getOptions) addFlags(cmd *cobra.Command) {
	o.print = genericclioptions.NewPrintFlags("")
	o.print.AddFlags(cmd)
	fl := cmd.Flags()
	fl.Lookup("output").Usage = "output format: wide (adds OWNER, messages in full), json, yaml, name, jsonpath=TEMPLATE, " +
		"jsonpath-file=FILE, go-template=TEMPLATE (default: a table)"
	fl.BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "list Syncs of every namespace (adds the NAMESPACE and OWNER columns)")
	fl.StringVarP(&o.selector, "selector", "l", "", "label selector (=, ==, !=, in, notin, exists), as kubectl's: -l team=web,tier!=db")
	fl.BoolVar(&o.noHeaders, "no-headers", false, "print the table without its header line")
	fl.BoolVarP(&o.watch, "watch", "w", false, "after the list, print a Sync again each time it changes, until interrupted")
	fl.BoolVar(&o.watchOnly, "watch-only", false, "print only the changes, not the list first (implies --watch)")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(
		[]cobra.Completion{"wide", "json", "yaml", "name", "jsonpath=", "go-template="}, cobra.ShellCompDirectiveNoFileComp|cobra.ShellCompDirectiveNoSpace))
}

const statusLong = `List Syncs as kubectl get does: NAME, READY, REASON (the Ready condition's reason),
REVISION (the last revision applied), SUSPENDED, AGE and MESSAGE.

When a newer revision than REVISION failed, MESSAGE starts with "revision <rev> failed:"
followed by why; while it is still applied, "revision <rev> in progress:". The table cuts a
message after its first line and 120 characters; -o wide never cuts and adds OWNER, the daemon
replica (its --replica-name, by default the pod name) that wrote the status, as kubectl shows
a pod's NODE. -A adds NAMESPACE and OWNER: the view of every Sync.

-o json and -o yaml print the Sync objects, a List of them without a NAME (as kubectl get);
-o name, jsonpath and go-template work as kubectl's. -w prints a Sync again each time it
changes, until interrupted.`

func newStatusCommand(kube *kubeFlags) *cobra.Command {
	o := &getOptions{kube: kube, inventories: true}
	cmd := &cobra.Command{
		Use:   "status [NAME...]",
		Short: "List Syncs with their readiness, reason, revision, age and message",
		Long:  statusLong + "\n\n`converge get syncs` is the same list under kubectl's verb.",
		Example: `  converge status -A
  converge status -n apps -o wide
  converge status -n apps web -o jsonpath='{.status.lastAttemptedRevision}'
  converge status -A -l team=web -w`,
		ValidArgsFunction: completeSyncNames(kube, 0),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), args)
		},
	}
	o.addFlags(cmd)
	return cmd
}

func newGetCommand(kube *kubeFlags) *cobra.Command {
	o := &getOptions{kube: kube}
	cmd := &cobra.Command{
		Use:   "get TYPE [NAME...] | TYPE/NAME...",
		Short: "List Syncs as kubectl get does (TYPE is syncs, sync or sy)",
		Long: statusLong + `

TYPE is syncs (or sync, sy, syncs.converge.dev); TYPE/NAME names one Sync, as kubectl's.
converge status is the same list without TYPE.`,
		Example: `  converge get syncs -A
  converge get sy -n apps web -o yaml
  converge get sync/web -n apps -w`,
		ValidArgsFunction: completeGetArgs(kube),
		RunE: func(cmd *cobra.Command, args []string) error {
			names, err := syncNamesOf(args)
			if err != nil {
				return err
			}
			return o.run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), names)
		},
	}
	o.addFlags(cmd)
	return cmd
}

// syncNamesOf reads `converge get`'s arguments: TYPE [NAME...] or TYPE/NAME..., TYPE one of
// syncTypes. It returns the names.
func syncNamesOf(args []string) ([]string, error) {
	const what = "converge get lists Syncs: converge get syncs [NAME...] or converge get sync/NAME"
	if len(args) == 0 {
		return nil, errors.New("converge get needs a resource type; " + what)
	}
	if !strings.Contains(args[0], "/") {
		if !slices.Contains(syncTypes, strings.ToLower(args[0])) {
			return nil, fmt.Errorf("unknown resource type %q; %s (use kubectl for other kinds)", args[0], what)
		}
		return args[1:], nil
	}
	names := make([]string, 0, len(args))
	for _, a := range args {
		typ, name, ok := strings.Cut(a, "/")
		switch {
		case !ok:
			return nil, fmt.Errorf("%q: there is no need to give a resource type as a separate argument when TYPE/NAME is given; %s", a, what)
		case !slices.Contains(syncTypes, strings.ToLower(typ)):
			return nil, fmt.Errorf("unknown resource type %q in %q; %s (use kubectl for other kinds)", typ, a, what)
		case name == "":
			return nil, fmt.Errorf("%q names no Sync; %s", a, what)
		}
		names = append(names, name)
	}
	return names, nil
}

// clock is what AGE is measured against.
var clock = time.Now

// run lists (or gets) the Syncs, prints them, and with -w prints each change until ctx ends.
func (o *getOptions) run(ctx context.Context, out, errOut io.Writer, names []string) error {
	wide := *o.print.OutputFormat == "wide"
	var printer printers.ResourcePrinter
	if f := *o.print.OutputFormat; f != "" && !wide {
		p, err := o.print.ToPrinter()
		if genericclioptions.IsNoCompatiblePrinterError(err) {
			return fmt.Errorf("--output %q: allowed formats are %s (default: the table)", f,
				strings.Join(append([]string{"wide"}, o.print.AllowedFormats()...), ", "))
		}
		if err != nil {
			return fmt.Errorf("--output %q: %w", f, err)
		}
		printer = p
	}
	sel, err := labels.Parse(o.selector)
	if err != nil {
		return fmt.Errorf("--selector %q: %w", o.selector, err)
	}
	if len(names) > 0 && !sel.Empty() {
		return errors.New("give Sync names or --selector, not both (as kubectl get)")
	}
	if len(names) > 0 && o.allNamespaces {
		return errors.New("a Sync name needs its namespace: give -n NAMESPACE rather than -A")
	}
	ns := ""
	if !o.allNamespaces {
		ns = o.kube.namespace()
	}
	api, err := newSyncAPI(o.kube, 0)
	if err != nil {
		return err
	}
	view := statusView{Wide: wide, AllNamespaces: o.allNamespaces, NoHeaders: o.noHeaders}
	p := &syncPrinter{out: out, printer: printer, view: view, single: len(names) == 1}
	rv := ""
	if !o.watchOnly {
		items, listRV, getErr := api.get(ctx, ns, names, sel)
		withInventories := o.inventories && printer == nil && len(names) == 0 && sel.Empty() && !o.watch
		if withInventories && apierrors.IsNotFound(getErr) {
			// No Sync API (converge apply alone): the inventories are all there is to list.
			return o.printInventories(ctx, out, ns, view, false)
		}
		if getErr != nil && len(items) == 0 {
			return getErr // nothing to print: not even an empty List
		}
		if err := p.printList(items); err != nil {
			return err
		}
		if len(items) == 0 && printer == nil && getErr == nil {
			fmt.Fprintln(errOut, noneFound(ns))
		}
		if getErr != nil {
			return getErr
		}
		if withInventories {
			return o.printInventories(ctx, out, ns, view, len(items) > 0)
		}
		rv = listRV
	}
	if !o.watch && !o.watchOnly {
		return nil
	}
	return api.watch(ctx, ns, names, sel, rv, p.printEvent)
}

// printInventories prints the inventories of converge apply in ns ("" for all) as a second
// table.
func (o *getOptions) printInventories(ctx context.Context, out io.Writer, ns string, view statusView, afterSyncs bool) error {
	c, err := o.kube.syncClient()
	if err != nil {
		return err
	}
	rows, err := listCLIInventories(ctx, c, ns)
	if err != nil {
		return explain(err, nil)
	}
	return printCLIInventories(out, rows, view, afterSyncs)
}

// noneFound is kubectl get's line for an empty list (on stderr).
func noneFound(ns string) string {
	if ns == "" {
		return "No Syncs found."
	}
	return fmt.Sprintf("No Syncs found in namespace %s.", ns)
}

// syncPrinter prints Syncs in the layout the flags chose: the table (printer nil) or one of
// kubectl's printers.
type syncPrinter struct {
	out     io.Writer
	printer printers.ResourcePrinter
	view    statusView
	// single prints the one named Sync as an object rather than a List, as kubectl get NAME.
	single bool
	// printed says the header was printed (a watch prints it once).
	printed bool
	// tw is the table writer of the whole run: a watch's rows line up with the list's.
	tw tableWriter
}

func (p *syncPrinter) printList(items []unstructured.Unstructured) error {
	if p.printer != nil {
		if p.single && len(items) == 1 {
			return p.printer.PrintObj(&items[0], p.out)
		}
		return p.printer.PrintObj(kubectlList(items), p.out)
	}
	syncs, err := typedSyncs(items)
	if err != nil {
		return err
	}
	if len(syncs) == 0 {
		return nil
	}
	view := p.view
	view.NoHeaders = view.NoHeaders || p.printed
	p.printed = true
	if p.tw == nil {
		p.tw = printers.GetNewTabWriter(p.out)
	}
	return writeTable(p.tw, syncColumns(view), syncs, view.NoHeaders)
}

// printEvent prints the Sync of one watch event (a deleted one too, in its last state).
func (p *syncPrinter) printEvent(obj *unstructured.Unstructured) error {
	if p.printer != nil {
		return p.printer.PrintObj(obj, p.out)
	}
	return p.printList([]unstructured.Unstructured{*obj})
}

// kubectlList is the List `kubectl get -o json|yaml` prints for several objects.
func kubectlList(items []unstructured.Unstructured) *unstructured.UnstructuredList {
	list := &unstructured.UnstructuredList{Object: map[string]any{
		"kind": "List", "apiVersion": "v1", "metadata": map[string]any{"resourceVersion": ""},
	}}
	list.Items = append(list.Items, items...)
	if list.Items == nil {
		list.Items = []unstructured.Unstructured{}
	}
	return list
}

// explainSyncs turns an error of the Sync API into the one line the CLI exits with: what
// failed and what to do, as `converge apply` says it (explain).
func explainSyncs(err error, what string) error {
	if apierrors.IsNotFound(err) {
		// A list or watch is not found only when the API server does not serve Syncs.
		return fmt.Errorf("%s: the cluster has no Sync API (the converge.dev CRD is not installed); "+
			"install it with converge install, or converge run installs it: %w", what, err)
	}
	return explain(fmt.Errorf("%s: %w", what, err), nil)
}

// fieldsForNames selects one Sync by name on the server; several names are filtered here.
func fieldsForNames(names []string) string {
	if len(names) != 1 {
		return ""
	}
	return fields.OneTermEqualSelector("metadata.name", names[0]).String()
}
