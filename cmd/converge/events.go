package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/cli-utils/pkg/object"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/status/v1alpha1"
)

const eventsLong = `Events prints the events of a Sync and of the objects it owns (its inventory), oldest
first, as flux events --for does: LAST SEEN, TYPE, REASON, OBJECT (Kind/name), COUNT and MESSAGE.
The daemon's events about the Sync (applied, pruned, failed) come with those Kubernetes records
about its objects (a Deployment scaled, a Pod that cannot be scheduled is the Pod's own, not
listed). The API server keeps events for an hour by default (--event-ttl).

Events of the objects are read by listing the events of each namespace the objects live in
(cluster-scoped objects: the default namespace), so the kubeconfig's user needs list on events
there. -o json and -o yaml print the events as a list. A Sync that does not exist is an error
with exit code 1; other errors exit 2.`

// eventRow is one event of `converge events`.
type eventRow struct {
	LastSeen metav1.Time     `json:"lastSeen"`
	Type     string          `json:"type"`
	Reason   string          `json:"reason"`
	Object   eventObjectNode `json:"object"`
	Count    int32           `json:"count,omitempty"`
	Message  string          `json:"message"`
}

// eventObjectNode names the object an event is about.
type eventObjectNode struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
}

// eventsOptions are the flags of `converge events`.
type eventsOptions struct {
	kube   *kubeFlags
	output string
}

func newEventsCommand(kube *kubeFlags) *cobra.Command {
	o := &eventsOptions{kube: kube}
	cmd := syncVerb(kube, "events SYNC",
		"Print the events of a Sync and of the objects it owns, oldest first",
		eventsLong, `  converge events -n apps web
  converge events -n apps web -o json | jq -r '.[] | select(.type == "Warning") | .message'`,
		func(cmd *cobra.Command, name string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), name)
		})
	addRowOutputFlag(cmd, &o.output)
	return cmd
}

func (o *eventsOptions) run(ctx context.Context, out, errOut io.Writer, name string) error {
	if err := checkRowFormat(o.output); err != nil {
		return err
	}
	_, s, err := readSync(ctx, o.kube, name)
	if err != nil {
		return err
	}
	c, ids, err := ownedObjects(ctx, o.kube, s)
	if err != nil {
		return err
	}
	rows, err := syncEvents(ctx, c, s, ids)
	if err != nil {
		return explain(err, nil)
	}
	if len(rows) == 0 && o.output == "table" {
		fmt.Fprintf(errOut, "No events for sync %s/%s or its objects.\n", s.Namespace, s.Name)
		return nil
	}
	return printRows(out, o.output, eventColumns(clock()), rows)
}

// syncEvents lists the events about s and about the objects ids, oldest first.
func syncEvents(ctx context.Context, c client.Client, s *v1alpha1.Sync, ids []object.ObjMetadata) ([]eventRow, error) {
	var rows []eventRow
	own := &corev1.EventList{}
	sel := fields.Set{"involvedObject.kind": "Sync", "involvedObject.name": s.Name}.AsSelector()
	if err := c.List(ctx, own, client.InNamespace(s.Namespace), client.MatchingFieldsSelector{Selector: sel}); err != nil {
		return nil, fmt.Errorf("list the events of sync %s/%s: %w", s.Namespace, s.Name, err)
	}
	for _, ev := range own.Items {
		if ev.InvolvedObject.UID == "" || ev.InvolvedObject.UID == s.UID {
			rows = append(rows, rowOf(ev))
		}
	}
	owned := map[[4]string]bool{}
	var namespaces []string
	for _, id := range ids {
		ns := id.Namespace
		if ns == "" {
			ns = metav1.NamespaceDefault // where the API server records a cluster-scoped object's events
		}
		owned[[4]string{id.GroupKind.Group, id.GroupKind.Kind, id.Namespace, id.Name}] = true
		if !slices.Contains(namespaces, ns) {
			namespaces = append(namespaces, ns)
		}
	}
	for _, ns := range namespaces {
		list := &corev1.EventList{}
		if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
			return nil, fmt.Errorf("list the events of namespace %s: %w", ns, err)
		}
		for _, ev := range list.Items {
			inv := ev.InvolvedObject
			group := groupOf(inv.APIVersion)
			if owned[[4]string{group, inv.Kind, inv.Namespace, inv.Name}] {
				rows = append(rows, rowOf(ev))
			}
		}
	}
	slices.SortStableFunc(rows, func(a, b eventRow) int { return a.LastSeen.Time.Compare(b.LastSeen.Time) })
	return rows, nil
}

// groupOf is the group of an apiVersion: "" for v1, "apps" for apps/v1.
func groupOf(apiVersion string) string {
	for i := range apiVersion {
		if apiVersion[i] == '/' {
			return apiVersion[:i]
		}
	}
	return ""
}

// rowOf is the row of ev; its time is the last it was seen, as kubectl get events shows.
func rowOf(ev corev1.Event) eventRow {
	seen := ev.LastTimestamp
	switch {
	case !seen.IsZero():
	case ev.Series != nil && !ev.Series.LastObservedTime.IsZero():
		seen = metav1.NewTime(ev.Series.LastObservedTime.Time)
	case !ev.EventTime.IsZero():
		seen = metav1.NewTime(ev.EventTime.Time)
	case !ev.FirstTimestamp.IsZero():
		seen = ev.FirstTimestamp
	default:
		seen = ev.CreationTimestamp
	}
	inv := ev.InvolvedObject
	return eventRow{LastSeen: metav1.NewTime(seen.Time.Truncate(time.Second)), Type: ev.Type, Reason: ev.Reason, Count: ev.Count,
		Object: eventObjectNode{APIVersion: inv.APIVersion, Kind: inv.Kind, Namespace: inv.Namespace, Name: inv.Name}, Message: ev.Message}
}

// eventColumns are the columns of `converge events`, flux events' and kubectl get events'.
func eventColumns(now time.Time) []column[eventRow] {
	return []column[eventRow]{
		{"LAST SEEN", true, func(r eventRow) string { return age(now, r.LastSeen) }},
		{"TYPE", true, func(r eventRow) string { return r.Type }},
		{"REASON", true, func(r eventRow) string { return r.Reason }},
		{"OBJECT", true, func(r eventRow) string { return r.Object.Kind + "/" + r.Object.Name }},
		{"COUNT", true, func(r eventRow) string { return fmt.Sprint(max(r.Count, 1)) }},
		{"MESSAGE", true, func(r eventRow) string { return cut(firstLine(r.Message), maxTableMessage) }},
	}
}
