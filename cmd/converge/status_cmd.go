package main

import (
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/status/v1alpha1"
)

func newStatusCommand(kube *kubeFlags) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:     "status [NAME]",
		Aliases: []string{"get"},
		Short:   "List Syncs with their readiness, revision, age and message",
		Example: `  converge status -A
  converge status -n apps web`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := kube.syncClient()
			if err != nil {
				return err
			}
			list := &v1alpha1.SyncList{}
			opts := []client.ListOption{}
			if !all {
				opts = append(opts, client.InNamespace(kube.namespace()))
			}
			if err := c.List(cmd.Context(), list, opts...); err != nil {
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
			printSyncs(cmd.OutOrStdout(), items, all)
			return nil
		},
	}
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "list Syncs of every namespace")
	return cmd
}

// printSyncs writes a table like `flux get kustomizations`.
func printSyncs(w io.Writer, items []v1alpha1.Sync, withNamespace bool) {
	sort.Slice(items, func(i, j int) bool {
		if items[i].Namespace != items[j].Namespace {
			return items[i].Namespace < items[j].Namespace
		}
		return items[i].Name < items[j].Name
	})
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if withNamespace {
		fmt.Fprint(tw, "NAMESPACE\t")
	}
	fmt.Fprintln(tw, "NAME\tREADY\tREVISION\tSUSPENDED\tAGE\tMESSAGE")
	for _, s := range items {
		ready, msg := "Unknown", "not reconciled yet"
		if c := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady); c != nil {
			ready, msg = string(c.Status), c.Message
		}
		if s.Status.ObservedGeneration != s.Generation && ready != "Unknown" {
			msg = fmt.Sprintf("generation %d not observed yet (status describes %d): %s", s.Generation, s.Status.ObservedGeneration, msg)
		}
		if withNamespace {
			fmt.Fprintf(tw, "%s\t", s.Namespace)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%t\t%s\t%s\n", s.Name, ready, s.Status.LastAppliedRevision, s.Spec.Suspend,
			duration.HumanDuration(time.Since(s.CreationTimestamp.Time)), truncate(firstLine(msg), 120))
	}
	_ = tw.Flush()
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
