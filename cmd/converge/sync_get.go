package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/cli-utils/pkg/object"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/cmd/converge/daemon"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// The verbs about one Sync (history, tree, events, trace, suspend, resume, diff) read it
// with getSync and print with printRows: one not-found message, one set of output formats.

// exitCodeNotFound is the exit code of a Sync (or object) that does not exist, as kubectl's.
const exitCodeNotFound = 1

// getSync reads the Sync ns/name through api. A Sync that does not exist is an exitError
// with code 1 naming the namespace searched and how to list the Syncs; a cluster without
// the Sync API, or another failure, says so (exit code 2).
func getSync(ctx context.Context, api *syncAPI, ns, name string) (*v1alpha1.Sync, error) {
	obj, err := api.syncs.Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		// A missing Sync and a cluster without the Sync API both answer 404 to a get; a
		// list tells them apart (only on this error path).
		if _, listErr := api.syncs.Namespace(ns).List(ctx, metav1.ListOptions{Limit: 1}); listErr != nil {
			return nil, explainSyncs(listErr, "list syncs "+where(ns))
		}
		return nil, syncNotFound(ns, name)
	}
	if err != nil {
		return nil, explainSyncs(err, "get sync "+ns+"/"+name)
	}
	syncs, err := typedSyncs([]unstructured.Unstructured{*obj})
	if err != nil {
		return nil, err
	}
	return &syncs[0], nil
}

// syncVerb is the command of a verb about one Sync (history, tree, events, suspend, resume,
// rollback, diff): one argument, the Sync's name, completed in the shell.
func syncVerb(kube *kubeFlags, use, short, long, example string, run func(cmd *cobra.Command, name string) error) *cobra.Command {
	return &cobra.Command{Use: use, Short: short, Long: long, Example: example,
		Args: cobra.ExactArgs(1), ValidArgsFunction: completeSyncNames(kube, 1),
		RunE: func(cmd *cobra.Command, args []string) error { return run(cmd, args[0]) }}
}

// readSync connects with kube's flags and reads the Sync name of kube's namespace (getSync).
func readSync(ctx context.Context, kube *kubeFlags, name string) (*syncAPI, *v1alpha1.Sync, error) {
	api, err := newSyncAPI(kube, 0)
	if err != nil {
		return nil, nil, err
	}
	s, err := getSync(ctx, api, kube.namespace(), name)
	return api, s, err
}

// ownedObjects reads the IDs of the objects Sync s owns, from its inventory (syncObjectIDs),
// with a client and an engine of kube's flags, and returns the client for more reads.
func ownedObjects(ctx context.Context, kube *kubeFlags, s *v1alpha1.Sync) (client.Client, []object.ObjMetadata, error) {
	c, eng, err := kube.clientAndEngine()
	if err != nil {
		return nil, nil, err
	}
	inv, err := eng.Inventory(ctx, daemon.InventoryRef(s))
	if err != nil {
		return nil, nil, explain(fmt.Errorf("sync %s/%s: read its inventory: %w", s.Namespace, s.Name, err), nil)
	}
	return c, syncObjectIDs(s, inv), nil
}

// syncNotFound is the error of a Sync ns/name that does not exist (exit code 1).
func syncNotFound(ns, name string) error {
	return &exitError{code: exitCodeNotFound, err: fmt.Errorf(
		"sync %s/%s not found; converge status -n %s lists the Syncs of %s (-A of every namespace)", ns, name, ns, ns)}
}

// rowFormats are the output formats of the verbs about one Sync.
var rowFormats = []cobra.Completion{"table", "json", "yaml"}

// addRowOutputFlag registers -o table|json|yaml on cmd, bound to format.
func addRowOutputFlag(cmd *cobra.Command, format *string) {
	cmd.Flags().StringVarP(format, "output", "o", "table", "output format: table, json or yaml")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(rowFormats, cobra.ShellCompDirectiveNoFileComp))
}

// checkRowFormat refuses an output format other than table, json and yaml.
func checkRowFormat(format string) error {
	switch format {
	case "table", "json", "yaml":
		return nil
	}
	return fmt.Errorf("--output %q: allowed formats are table, json, yaml", format)
}

// printRows writes rows as the table of cols, or as a JSON or YAML list (format "json",
// "yaml"): the layouts of `converge history`.
func printRows[R any](out io.Writer, format string, cols []column[R], rows []R) error {
	if format == "json" || format == "yaml" {
		if rows == nil {
			rows = []R{}
		}
		return writeStructured(out, rows, format)
	}
	return writeTable(printers.GetNewTabWriter(out), cols, rows, false)
}
