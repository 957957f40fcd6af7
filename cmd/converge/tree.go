package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/cli-utils/pkg/object"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/cmd/converge/daemon"
	"github.com/converge-dev/converge/inventory"
	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/status/v1alpha1"
)

const treeLong = `Tree lists the objects a Sync owns, as flux tree kustomization does: the entries of its
inventory (the ConfigMap <sync>-inventory; the recovery copy in status.inventory when that is
lost), each with its KIND, NAMESPACE/NAME, HEALTH (kstatus, read now: Current, InProgress,
Failed, Terminating, NotFound, Unknown) and kstatus MESSAGE, and FILE, the file of the source it
was rendered from. A Sync whose spec.driftPolicy leaves drift as it is (Report) adds DRIFT:
the fields its last reconcile found changed, each with the field manager that changed it, or
"deleted" (from status.drift, at most 20 objects). Drift the Sync took back (Correct) is shown
the same way, "corrected <age> ago: ", from its newest DriftCorrected event (kept by the API
server for an hour by default).

FILE is not stored in the cluster: tree renders the Sync's source at the revision it last
applied, as converge diff does (git sources only, with the kubeconfig's credentials; a
file:// or loopback URL only with --allow-local-git), and matches the objects. --files=false skips that fetch; when the source cannot be rendered, FILE
stays empty and stderr says why. HEALTH is kstatus alone: spec.healthCheckExprs are the
daemon's judgement (converge status shows its verdict).

-o json and -o yaml print the objects as a list. A Sync that does not exist is an error with
exit code 1; other errors exit 2.`

// treeOptions are the flags of `converge tree`.
type treeOptions struct {
	kube       *kubeFlags
	allowLocal bool
	output     string
	files      bool
}

// treeObject is one row of `converge tree`.
type treeObject struct {
	Group     string `json:"group,omitempty"`
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	Health    string `json:"health"`
	Message   string `json:"message,omitempty"`
	File      string `json:"file,omitempty"`
	// Drift is how the object drifted, as status.drift records it: its changed fields and
	// their managers, or "deleted"; empty when it did not. For drift the Sync took back, as
	// its newest DriftCorrected event records it, with DriftCorrected set to that event's time.
	Drift          string       `json:"drift,omitempty"`
	DriftCorrected *metav1.Time `json:"driftCorrected,omitempty"`
}

func newTreeCommand(kube *kubeFlags) *cobra.Command {
	o := &treeOptions{kube: kube}
	cmd := syncVerb(kube, "tree SYNC",
		"List the objects a Sync owns with their health and the file they came from",
		treeLong, `  converge tree -n apps web
  converge tree -n apps web -o json | jq -r '.[] | select(.health != "Current") | .name'`,
		func(cmd *cobra.Command, name string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), name)
		})
	addRowOutputFlag(cmd, &o.output)
	cmd.Flags().BoolVar(&o.files, "files", true, "render the Sync's source to show each object's FILE (a git fetch)")
	addAllowLocalGitFlag(cmd, &o.allowLocal)
	return cmd
}

func (o *treeOptions) run(ctx context.Context, out, errOut io.Writer, name string) error {
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
	var files map[object.ObjMetadata]string
	if o.files && len(ids) > 0 {
		if b, err := loadSyncSource(ctx, c, s, o.allowLocal, false); err != nil {
			fmt.Fprintf(errOut, "warning: FILE left empty: %v\n", err)
		} else {
			files = originsByID(c, s, b)
		}
	}
	drift := driftByID(s)
	corrected, at, err := correctedDrift(ctx, c, s)
	if err != nil {
		fmt.Fprintf(errOut, "warning: drift corrected not shown: %v\n", err)
	}
	rows := make([]treeObject, 0, len(ids))
	for _, id := range ids {
		row := treeObject{Group: id.GroupKind.Group, Kind: id.GroupKind.Kind, Namespace: id.Namespace, Name: id.Name, File: files[id], Drift: drift[id]}
		if change, ok := corrected[id]; ok && row.Drift == "" {
			row.Drift, row.DriftCorrected = "corrected "+age(clock(), at)+" ago: "+change, &at
		}
		row.Health, row.Message, err = health(ctx, c, id)
		if err != nil {
			return explain(err, nil)
		}
		rows = append(rows, row)
	}
	if len(rows) == 0 && o.output == "table" {
		fmt.Fprintf(errOut, "Sync %s/%s owns no objects.\n", s.Namespace, s.Name)
		return nil
	}
	return printRows(out, o.output, treeColumns(len(drift)+len(corrected) > 0), rows)
}

// treeColumns are the columns of `converge tree`; DRIFT only when some object drifted.
func treeColumns(drift bool) []column[treeObject] {
	return []column[treeObject]{
		{"KIND", true, func(r treeObject) string { return r.Kind }},
		{"NAMESPACE/NAME", true, func(r treeObject) string { return nsName(r.Namespace, r.Name) }},
		{"HEALTH", true, func(r treeObject) string { return r.Health }},
		{"FILE", true, func(r treeObject) string { return r.File }},
		{"DRIFT", drift, func(r treeObject) string { return cut(r.Drift, maxTableMessage) }},
		{"MESSAGE", true, func(r treeObject) string { return cut(firstLine(r.Message), maxTableMessage) }},
	}
}

// correctedDrift is how each object the newest DriftCorrected event of s names had drifted
// (DriftedObject.Change, from its v1alpha1.CorrectedDriftAnnotation), and when that event
// was last seen; nothing when there is no such event.
func correctedDrift(ctx context.Context, c client.Client, s *v1alpha1.Sync) (map[object.ObjMetadata]string, metav1.Time, error) {
	list := &corev1.EventList{}
	sel := fields.Set{"involvedObject.kind": "Sync", "involvedObject.name": s.Name, "reason": "DriftCorrected"}.AsSelector()
	if err := c.List(ctx, list, client.InNamespace(s.Namespace), client.MatchingFieldsSelector{Selector: sel}); err != nil {
		return nil, metav1.Time{}, fmt.Errorf("list the events of sync %s/%s: %w", s.Namespace, s.Name, err)
	}
	var newest *corev1.Event
	var at metav1.Time
	latest := clock().Add(time.Minute) // an event dated later is not the daemon's
	for i, ev := range list.Items {
		if ev.InvolvedObject.UID != s.UID || ev.Source.Component != "converge" || ev.Annotations[v1alpha1.CorrectedDriftAnnotation] == "" ||
			rowOf(ev).LastSeen.After(latest) {
			continue
		}
		if seen := rowOf(ev).LastSeen; newest == nil || seen.After(at.Time) {
			newest, at = &list.Items[i], seen
		}
	}
	if newest == nil {
		return nil, at, nil
	}
	var objs []v1alpha1.DriftedObject
	if err := json.Unmarshal([]byte(newest.Annotations[v1alpha1.CorrectedDriftAnnotation]), &objs); err != nil {
		return nil, at, fmt.Errorf("event %s: annotation %s: %w", newest.Name, v1alpha1.CorrectedDriftAnnotation, err)
	}
	out := make(map[object.ObjMetadata]string, len(objs))
	for _, d := range objs {
		out[d.ID()] = printable(d.Change())
	}
	return out, at, nil
}

// printable is s with its control characters (a terminal's escape sequences among them)
// shown as Go escapes: a field manager's name is any client's choice.
func printable(s string) string {
	if !strings.ContainsFunc(s, unicode.IsControl) {
		return s
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

// driftByID is how each object of s.status.drift drifted (DriftedObject.Change).
func driftByID(s *v1alpha1.Sync) map[object.ObjMetadata]string {
	if s.Status.Drift == nil {
		return nil
	}
	out := make(map[object.ObjMetadata]string, len(s.Status.Drift.Objects))
	for _, d := range s.Status.Drift.Objects {
		out[d.ID()] = printable(d.Change())
	}
	return out
}

// nsName is namespace/name, or name for a cluster-scoped object.
func nsName(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

// syncObjectIDs are the objects of inv sorted by kind, namespace and name; the recovery copy of
// s's status when inv is empty (its ConfigMap was lost).
func syncObjectIDs(s *v1alpha1.Sync, inv *inventory.Inventory) []object.ObjMetadata {
	var ids []object.ObjMetadata
	for _, e := range inv.Entries() {
		ids = append(ids, e.Object)
	}
	if len(ids) == 0 && s.Status.Inventory != nil {
		for _, e := range s.Status.Inventory.Objects {
			if id, err := object.ParseObjMetadata(e.ID); err == nil {
				ids = append(ids, id)
			}
		}
	}
	slices.SortFunc(ids, func(a, b object.ObjMetadata) int {
		return cmp.Or(cmp.Compare(a.GroupKind.Kind, b.GroupKind.Kind), cmp.Compare(a.GroupKind.Group, b.GroupKind.Group),
			cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return ids
}

// health reads the object id and judges it with kstatus: its status and message. An object
// that is gone is NotFound, one whose kind the cluster no longer serves too.
func health(ctx context.Context, c client.Client, id object.ObjMetadata) (string, string, error) {
	mapping, err := c.RESTMapper().RESTMapping(id.GroupKind)
	if meta.IsNoMatchError(err) {
		return string(status.NotFoundStatus), "the cluster serves no kind " + id.GroupKind.String(), nil
	}
	if err != nil {
		return "", "", fmt.Errorf("%s: %w", id, err)
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(mapping.GroupVersionKind)
	err = c.Get(ctx, client.ObjectKey{Namespace: id.Namespace, Name: id.Name}, u)
	if apierrors.IsNotFound(err) {
		return string(status.NotFoundStatus), "not in the cluster", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("get %s %s: %w", id.GroupKind.Kind, nsName(id.Namespace, id.Name), err)
	}
	st, msg := healthOf(u)
	return st, msg, nil
}

// healthOf is the kstatus status and message of u; Unknown when kstatus cannot read it.
func healthOf(u *unstructured.Unstructured) (string, string) {
	res, err := status.Compute(u)
	if err != nil {
		return string(status.UnknownStatus), err.Error()
	}
	return string(res.Status), res.Message
}

// originsByID maps the objects of b, rendered from s's source, to the file each came from,
// keyed as the inventory keys them: a namespaced object without a namespace gets the
// namespace the daemon applies it in (spec.targetNamespace, else the default namespace).
func originsByID(c client.Client, s *v1alpha1.Sync, b *sources.Bundle) map[object.ObjMetadata]string {
	opts := daemon.ApplyOptions(s)
	files := make(map[object.ObjMetadata]string, len(b.Objects))
	for i, u := range b.Objects {
		if i >= len(b.Origins) || b.Origins[i] == "" {
			continue
		}
		id := object.UnstructuredToObjMetadata(u)
		if mapping, err := c.RESTMapper().RESTMapping(id.GroupKind); err == nil && mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			id.Namespace = cmp.Or(opts.TargetNamespace, id.Namespace, opts.DefaultNamespace)
		}
		files[id] = b.Origins[i]
	}
	return files
}
