package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/inventory"
)

// cliInventoryRow is one inventory of "converge apply --inventory" as `converge status`
// lists it.
type cliInventoryRow struct {
	Namespace, Name string
	Objects         string // the count, "?" when it cannot be read
	Created         metav1.Time
	Message         string // why it cannot be read, with what to do
}

// listCLIInventories lists the inventories of "converge apply --inventory" in ns ("" for
// every namespace): the ConfigMaps labelled with an inventory ID of the CLI's own (cli_),
// with the number of objects each records.
func listCLIInventories(ctx context.Context, c client.Client, ns string) ([]cliInventoryRow, error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMapList"))
	opts := []client.ListOption{client.HasLabels{inventory.IDLabel}}
	if ns != "" {
		opts = append(opts, client.InNamespace(ns))
	}
	if err := c.List(ctx, list, opts...); err != nil {
		return nil, fmt.Errorf("list the inventories of converge apply: %w", err)
	}
	store := inventory.NewStore(c)
	var rows []cliInventoryRow
	for _, cm := range list.Items {
		ref, err := cliInventoryRef(cm.Name, cm.Namespace)
		if err != nil || cm.Labels[inventory.IDLabel] != ref.ID {
			continue // a Sync's, converge install's, or one not migrated yet
		}
		row := cliInventoryRow{Namespace: cm.Namespace, Name: cm.Name, Created: cm.CreationTimestamp, Objects: "?"}
		inv, err := store.Get(ctx, ref)
		switch {
		case inventory.IsOverwritten(err):
			row.Message = fmt.Sprintf("overwritten by its own set's ConfigMap: release its objects with converge delete --inventory %s --cascade=orphan, "+
				"then apply under another inventory name", ref)
		case err != nil:
			row.Message = err.Error()
		default:
			row.Objects = strconv.Itoa(inv.Len())
		}
		rows = append(rows, row)
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Namespace != rows[j].Namespace {
			return rows[i].Namespace < rows[j].Namespace
		}
		return rows[i].Name < rows[j].Name
	})
	return rows, nil
}

// printCLIInventories writes the rows as a second table after the Syncs', as kubectl get
// writes one table per kind: a blank line, then NAME prefixed with the kind.
func printCLIInventories(w io.Writer, rows []cliInventoryRow, view statusView, afterSyncs bool) error {
	if len(rows) == 0 {
		return nil
	}
	if afterSyncs {
		fmt.Fprintln(w)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if !view.NoHeaders {
		if view.AllNamespaces {
			fmt.Fprint(tw, "NAMESPACE\t")
		}
		fmt.Fprintln(tw, "NAME\tOBJECTS\tAGE\tMESSAGE")
	}
	now := view.Now
	if now.IsZero() {
		now = clock()
	}
	for _, r := range rows {
		if view.AllNamespaces {
			fmt.Fprintf(tw, "%s\t", r.Namespace)
		}
		msg := r.Message
		if !view.Wide {
			msg = cut(firstLine(strings.TrimSpace(msg)), maxTableMessage)
		}
		if msg == "" {
			msg = "<none>"
		}
		fmt.Fprintf(tw, "inventory/%s\t%s\t%s\t%s\n", r.Name, r.Objects, duration.HumanDuration(now.Sub(r.Created.Time)), msg)
	}
	return tw.Flush()
}
