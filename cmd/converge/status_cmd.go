package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/status/v1alpha1"
)

func newStatusCommand(kube *kubeFlags) *cobra.Command {
	var all bool
	var output string
	cmd := &cobra.Command{
		Use:     "status [NAME]",
		Aliases: []string{"get"},
		Short:   "List Syncs with their readiness, revision, age and message, and the inventories of converge apply",
		Long: `List Syncs with their readiness, revision, age and message.

A second table lists the inventories of "converge apply --inventory" (NAME inventory/<name>,
as kubectl get names each kind when it lists several), with the number of objects each owns
and, when one cannot be read, why and what to do; "converge delete --inventory" removes one.
-n and -A choose the namespaces of both tables; a NAME, -o json and -o yaml show Syncs only.

The OWNER column names the daemon replica (its --replica-name, by default the pod name) that
wrote the Sync's status: it shows with -A, the view of every Sync, and with -o wide, as kubectl
shows a pod's NODE. -o json and -o yaml print the same rows, owner included, for scripts.`,
		Example: `  converge status -A
  converge status -n apps -o wide
  converge status -n apps web -o json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch output {
			case "", "wide", "json", "yaml":
			default:
				return fmt.Errorf("--output %q: want wide, json or yaml", output)
			}
			c, err := kube.syncClient()
			if err != nil {
				return err
			}
			list := &v1alpha1.SyncList{}
			opts := []client.ListOption{}
			if !all {
				opts = append(opts, client.InNamespace(kube.namespace()))
			}
			// Without the Sync CRD (converge apply alone) there are only the CLI's inventories.
			noSyncs := false
			if err := c.List(cmd.Context(), list, opts...); meta.IsNoMatchError(err) && len(args) == 0 {
				noSyncs = true
			} else if err != nil {
				return fmt.Errorf("list syncs: %w", err)
			}
			items := list.Items
			if len(args) == 1 {
				items = nil
				for _, s := range list.Items {
					if s.Name == args[0] {
						items = append(items, s)
					}
				}
				if len(items) == 0 {
					return fmt.Errorf("sync %s/%s not found", kube.namespace(), args[0])
				}
			}
			view := statusView{Output: output, AllNamespaces: all, Now: time.Now()}
			if !noSyncs {
				if err := printSyncs(cmd.OutOrStdout(), items, view); err != nil {
					return err
				}
			}
			if len(args) == 1 || (output != "" && output != "wide") {
				return nil
			}
			ns := kube.namespace()
			if all {
				ns = ""
			}
			rows, err := listCLIInventories(cmd.Context(), c, ns)
			if err != nil {
				return err
			}
			return printCLIInventories(cmd.OutOrStdout(), rows, view, !noSyncs)
		},
	}
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "list Syncs of every namespace (adds the NAMESPACE and OWNER columns)")
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: wide (adds OWNER), json or yaml (default: a table)")
	return cmd
}

// statusView says how printSyncs lays the Syncs out.
type statusView struct {
	// Output is "" (a table), "wide" (the table with OWNER), "json" or "yaml".
	Output string
	// AllNamespaces adds the NAMESPACE column, and OWNER: across namespaces the table is the
	// view of the whole fleet, where which replica holds a Sync matters.
	AllNamespaces bool
	// Now is the clock AGE is measured against.
	Now time.Time
}

// syncRow is one Sync as `converge status` shows it; -o json and yaml print these.
type syncRow struct {
	Namespace          string    `json:"namespace"`
	Name               string    `json:"name"`
	Ready              string    `json:"ready"`
	Reason             string    `json:"reason,omitempty"`
	Revision           string    `json:"revision"`
	Suspended          bool      `json:"suspended"`
	Owner              string    `json:"owner"`
	Generation         int64     `json:"generation"`
	ObservedGeneration int64     `json:"observedGeneration"`
	Created            time.Time `json:"created"`
	Message            string    `json:"message"`
}

func rowOf(s v1alpha1.Sync) syncRow {
	r := syncRow{Namespace: s.Namespace, Name: s.Name, Ready: "Unknown", Message: "not reconciled yet",
		Revision: s.Status.LastAppliedRevision, Suspended: s.Spec.Suspend, Owner: s.Status.Owner,
		Generation: s.Generation, ObservedGeneration: s.Status.ObservedGeneration, Created: s.CreationTimestamp.UTC()}
	if c := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady); c != nil {
		r.Ready, r.Reason, r.Message = string(c.Status), c.Reason, c.Message
	}
	return r
}

// printSyncs writes a table like `flux get kustomizations`, or the rows as JSON or YAML.
func printSyncs(w io.Writer, items []v1alpha1.Sync, view statusView) error {
	sort.Slice(items, func(i, j int) bool {
		if items[i].Namespace != items[j].Namespace {
			return items[i].Namespace < items[j].Namespace
		}
		return items[i].Name < items[j].Name
	})
	rows := make([]syncRow, 0, len(items))
	for _, s := range items {
		rows = append(rows, rowOf(s))
	}
	switch view.Output {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Syncs []syncRow `json:"syncs"`
		}{rows})
	case "yaml":
		b, err := yaml.Marshal(struct {
			Syncs []syncRow `json:"syncs"`
		}{rows})
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	return printTable(w, rows, view)
}

// printTable writes the rows as a table; OWNER shows with -o wide and with -A.
func printTable(w io.Writer, rows []syncRow, view statusView) error {
	owner := view.Output == "wide" || view.AllNamespaces
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if view.AllNamespaces {
		fmt.Fprint(tw, "NAMESPACE\t")
	}
	fmt.Fprint(tw, "NAME\tREADY\tREVISION\tSUSPENDED\tAGE\t")
	if owner {
		fmt.Fprint(tw, "OWNER\t")
	}
	fmt.Fprintln(tw, "MESSAGE")
	for _, r := range rows {
		msg := r.Message
		if r.ObservedGeneration != r.Generation && r.Ready != "Unknown" {
			msg = fmt.Sprintf("generation %d not observed yet (status describes %d): %s", r.Generation, r.ObservedGeneration, msg)
		}
		if view.AllNamespaces {
			fmt.Fprintf(tw, "%s\t", r.Namespace)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%t\t%s\t", r.Name, r.Ready, r.Revision, r.Suspended, duration.HumanDuration(view.Now.Sub(r.Created)))
		if owner {
			fmt.Fprintf(tw, "%s\t", cmp.Or(r.Owner, "<none>"))
		}
		fmt.Fprintln(tw, truncate(firstLine(msg), 120))
	}
	return tw.Flush()
}

func firstLine(s string) string {
	for i, r := range s {
		if r == '\n' {
			return s[:i]
		}
	}
	return s
}

// truncate cuts s to n bytes and marks the cut with "…" (for display only).
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
