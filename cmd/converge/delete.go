package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/inventory"
)

// deleteFlags are the flags of "converge delete".
type deleteFlags struct {
	inventory      string
	dryRun         bool
	cascade        string
	wait           bool
	timeout        time.Duration
	ignoreNotFound bool
	output         string
}

func newDeleteCommand(kube *kubeFlags) *cobra.Command {
	var f deleteFlags
	cmd := &cobra.Command{
		Use:   "delete --inventory [NAMESPACE/]NAME",
		Short: `Delete the objects of a "converge apply --inventory" set, and its inventory`,
		Long: `Delete deletes every object the inventory of "converge apply --inventory" owns (those
that still carry its owner annotation and the UID it recorded; an object taken over by another
owner or recreated by someone else is left alone), in the reverse of the apply order, then the
inventory ConfigMap itself, as "kubectl delete -k" or "flux delete" does for what they applied.

With --dry-run nothing is deleted: the output lists what would go. With --cascade=orphan the
objects are released instead (their owner annotation removed, as cli-utils abandons an object)
and only the inventory is deleted: another set, or "kubectl apply", may then take them.

Only the inventories of "converge apply" are deleted here: the inventory of a Sync goes with
the Sync (kubectl delete syncs.converge.dev NAME; its spec.deletionPolicy decides what happens to its objects),
the one of "converge install" with "converge uninstall".

An inventory whose ConfigMap was overwritten by a ConfigMap of its own set (an earlier version
applied a set holding a ConfigMap named as its inventory) is repaired first: the set's data is
taken out of it, its recorded entries kept; that ConfigMap goes with the inventory.

Exit codes: 0 deleted (or nothing to delete with --dry-run); 1 something would be deleted
(--dry-run only); 2 an error (nothing or only part of the set was deleted: run it again).`,
		Example: `  # What would go? (exit 1 when something would)
  converge delete --inventory apps/prod --dry-run

  # Delete the set and wait until its objects are gone
  converge delete --inventory prod -n apps --wait

  # Keep the objects, drop the inventory (another set may adopt them)
  converge delete --inventory apps/prod --cascade=orphan`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return f.run(cmd, kube) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.inventory, "inventory", "", "[NAMESPACE/]NAME of the inventory ConfigMap, as given to converge apply (required)")
	fl.BoolVar(&f.dryRun, "dry-run", false, "show what would be deleted, delete nothing")
	fl.StringVar(&f.cascade, "cascade", "background", `"background" deletes the objects; "orphan" releases them and deletes only the inventory`)
	fl.BoolVar(&f.wait, "wait", false, "wait until the deleted objects are gone (finalizers done)")
	fl.DurationVar(&f.timeout, "timeout", 5*time.Minute, "how long --wait waits")
	fl.BoolVar(&f.ignoreNotFound, "ignore-not-found", false, "exit 0 when the inventory does not exist")
	fl.StringVarP(&f.output, "output", "o", "", "output format: json or yaml (default: lines for people)")
	return cmd
}

func (f *deleteFlags) run(cmd *cobra.Command, kube *kubeFlags) error {
	fail := func(err error) error { return &exitError{code: exitCodeError, err: err} }
	if err := f.validate(); err != nil {
		return fail(err)
	}
	ref, err := cliInventoryRef(f.inventory, kube.namespace())
	if err != nil {
		return fail(err)
	}
	ctx := cmd.Context()
	c, eng, err := kube.clientAndEngine()
	if err != nil {
		return fail(err)
	}
	found, err := checkDeletable(ctx, c, ref)
	switch {
	case err != nil:
		return fail(err)
	case !found && f.ignoreNotFound:
		return nil
	case !found:
		return fail(fmt.Errorf("inventory %s not found: nothing to delete (converge status lists the inventories of converge apply)", ref))
	}
	mopts := inventory.DefaultMigrateOptions()
	mopts.DryRun = f.dryRun
	if ref, err = eng.Migrate(ctx, ref, mopts); err != nil {
		return fail(explain(err, nil))
	}
	if !f.dryRun {
		removed, err := inventory.NewStore(c).Repair(ctx, ref)
		if err != nil {
			return fail(err)
		}
		if len(removed) > 0 {
			fmt.Fprintf(cmd.ErrOrStderr(), "inventory %s was overwritten by its own set's ConfigMap %s: took out its keys %s; that ConfigMap goes with the inventory\n",
				ref, ref, strings.Join(removed, ", "))
		}
	}
	res, delErr := f.delete(ctx, eng, ref)
	if delErr == nil && f.wait && !f.dryRun {
		delErr = waitGone(ctx, c, res, f.timeout)
	}
	rep := newReport("", f.dryRun, res, delErr)
	var out bytes.Buffer
	if err := rep.write(&out, f.output); err != nil {
		return fail(err)
	}
	if _, err := io.Copy(cmd.OutOrStdout(), &out); err != nil {
		return fail(err)
	}
	switch {
	case delErr != nil:
		if inventory.IsOverwritten(delErr) {
			delErr = fmt.Errorf("%w; run converge delete without --dry-run: it takes the set's data out first", delErr)
		}
		return fail(explain(delErr, res))
	case f.dryRun && len(rep.Pruned) > 0:
		return &exitError{code: exitCodeChanges, err: errChangesFound}
	case !f.dryRun && f.output == "":
		fmt.Fprintf(cmd.OutOrStdout(), "inventory %s deleted\n", ref)
	}
	return nil
}

func (f *deleteFlags) validate() error {
	switch f.output {
	case "", "json", "yaml":
	default:
		return fmt.Errorf("--output %q: want json or yaml", f.output)
	}
	if f.cascade != "background" && f.cascade != "orphan" {
		return fmt.Errorf("--cascade %q: want background or orphan", f.cascade)
	}
	if f.inventory == "" {
		return errors.New("converge delete needs --inventory [NAMESPACE/]NAME, the inventory converge apply was given " +
			"(converge status lists them)")
	}
	return nil
}

// delete deletes (or, --cascade=orphan, releases) the set of ref; under --dry-run it says
// what would be deleted: a dry-run prune of the whole set, or the entries to release.
func (f *deleteFlags) delete(ctx context.Context, eng *engine.Engine, ref inventory.Ref) (*engine.Result, error) {
	switch {
	case f.dryRun && f.cascade == "orphan":
		inv, err := eng.Inventory(ctx, ref)
		if err != nil {
			return nil, err
		}
		res := &engine.Result{}
		for _, e := range inv.Entries() {
			res.Pruned = append(res.Pruned, engine.Change{ID: e.Object.String(), Object: e.Object,
				Action: engine.ActionSkipped, Message: "released (dry-run)"})
		}
		return res, nil
	case f.dryRun:
		opts := engine.DefaultApplyOptions()
		opts.DryRun, opts.Prune, opts.AllowEmpty, opts.Wait = true, true, true, false
		return eng.Apply(ctx, engine.Set{Inventory: ref}, opts)
	case f.cascade == "orphan":
		return eng.Abandon(ctx, ref, engine.DefaultDeleteOptions())
	}
	return eng.Delete(ctx, ref, engine.DefaultDeleteOptions())
}

// checkDeletable reads the inventory ConfigMap of ref: found is false when it does not
// exist; the inventory of a Sync or of "converge install" (or a ConfigMap that is no
// inventory) is refused, saying what deletes it.
func checkDeletable(ctx context.Context, c client.Client, ref inventory.Ref) (found bool, err error) {
	cm := &metav1.PartialObjectMetadata{}
	cm.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	if err := c.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, explain(fmt.Errorf("inventory %s: read: %w", ref, err), nil)
	}
	id := cm.Labels[inventory.IDLabel]
	switch {
	case id == ref.ID || id == ref.Legacy:
		return true, nil
	case strings.HasPrefix(id, string(inventory.OwnerSync)+"_"):
		return true, fmt.Errorf("ConfigMap %s is the inventory of %s, not of converge apply: delete the Sync "+
			"(kubectl delete syncs.converge.dev -n NAMESPACE NAME); its spec.deletionPolicy decides what happens to its objects",
			ref, inventory.Describe(id))
	case strings.HasPrefix(id, string(inventory.OwnerInstall)+"_"):
		return true, fmt.Errorf("ConfigMap %s is the inventory of converge install: remove it with converge uninstall", ref)
	case id == "":
		return true, fmt.Errorf("ConfigMap %s has no label %s: it is not an inventory; nothing was deleted", ref, inventory.IDLabel)
	}
	return true, fmt.Errorf("ConfigMap %s holds the inventory of %s, not of converge apply --inventory %s; nothing was deleted",
		ref, inventory.Describe(id), ref)
}

// waitGone waits until every object res deleted is gone from the API server.
func waitGone(ctx context.Context, c client.Client, res *engine.Result, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, ch := range res.Pruned {
		if ch.Action != engine.ActionPruned {
			continue
		}
		mapping, err := c.RESTMapper().RESTMapping(ch.Object.GroupKind)
		if err != nil {
			continue // its kind is gone with its CRD: so is the object
		}
		obj := &metav1.PartialObjectMetadata{}
		obj.SetGroupVersionKind(mapping.GroupVersionKind)
		key := client.ObjectKey{Namespace: ch.Object.Namespace, Name: ch.Object.Name}
		err = wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			err := c.Get(ctx, key, obj)
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return false, client.IgnoreNotFound(err)
		})
		if err != nil {
			return fmt.Errorf("--wait: %s %s still exists after %s (a finalizer may hold it): %w",
				ch.Object.GroupKind.Kind, key, timeout, err)
		}
	}
	return nil
}
