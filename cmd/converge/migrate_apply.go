package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/cli-utils/pkg/object"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/inventory"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// handover applies the Syncs of a plan and suspends each old object once its Sync adopted
// everything the old object applied.
type handover struct {
	c       client.Client
	dc      dynamic.Interface
	timeout time.Duration
	suspend bool
}

// handOverResult is the outcome of --apply for one Sync.
type handOverResult struct {
	From      string `json:"from"`
	Sync      string `json:"sync"`
	Applied   bool   `json:"applied"`
	Ready     bool   `json:"ready"`
	Suspended bool   `json:"suspended"`
	// Missing are the objects the old tool applied that the Sync's inventory does not list.
	Missing []string `json:"missing,omitempty"`
	// LeftAlone are the objects the old tool listed that the Sync does not and need not,
	// each with why: an annotation of theirs makes the Sync leave them alone
	// (engine.LeftAloneBy), or they are not in the cluster (the old tool skipped them too).
	LeftAlone []string `json:"leftAlone,omitempty"`
	Error     string   `json:"error,omitempty"`
}

func (h handOverResult) line() string {
	switch {
	case h.Suspended && len(h.LeftAlone) > 0:
		return fmt.Sprintf("Sync %s applied, Ready and listing every object but %s; %s %s",
			h.Sync, strings.Join(h.LeftAlone, ", "), h.From, suspendedWords(h.From))
	case h.Suspended:
		return fmt.Sprintf("Sync %s applied, Ready and listing every object; %s %s", h.Sync, h.From, suspendedWords(h.From))
	case h.Error != "":
		return fmt.Sprintf("Sync %s: %s; %s left running", h.Sync, h.Error, h.From)
	}
	return fmt.Sprintf("Sync %s applied; %s left running (--suspend-source=false)", h.Sync, h.From)
}

// dryRun validates every Sync with a server-side dry-run apply: nothing is written.
func (h *handover) dryRun(ctx context.Context, p *migrationPlan) error {
	var errs []error
	for _, s := range p.Syncs {
		u := &unstructured.Unstructured{Object: s}
		if err := h.c.Patch(ctx, u, client.Apply, client.FieldOwner(engine.FieldManager), client.DryRunAll); err != nil { //nolint:staticcheck // a Sync applied as unstructured, as a user's YAML
			errs = append(errs, fmt.Errorf("Sync %s/%s: dry-run apply: %w", u.GetNamespace(), u.GetName(), err))
		}
	}
	return errors.Join(errs...)
}

// run applies every Sync, then (with suspend) waits for each and suspends its old object.
func (h *handover) run(ctx context.Context, p *migrationPlan, progress io.Writer) error {
	var errs []error
	for _, m := range p.migs {
		if m.Sync == nil {
			continue
		}
		r := handOverResult{From: m.From, Sync: m.Sync.Namespace + "/" + m.Sync.Name}
		if err := h.handOver(ctx, m, &r, progress); err != nil {
			r.Error = err.Error()
			errs = append(errs, fmt.Errorf("Sync %s: %w", r.Sync, err))
		}
		p.HandOvers = append(p.HandOvers, r)
	}
	return errors.Join(errs...)
}

func (h *handover) handOver(ctx context.Context, m *migration, r *handOverResult, progress io.Writer) error {
	obj, err := syncObject(m)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: obj}
	if err := h.c.Patch(ctx, u, client.Apply, client.FieldOwner(engine.FieldManager)); err != nil { //nolint:staticcheck // see dryRun
		return fmt.Errorf("apply: %w", err)
	}
	r.Applied = true
	if !h.suspend {
		return nil
	}
	if m.Sync.Spec.Suspend {
		return errors.New("the Sync is suspended, as its source was: it adopts nothing until resumed")
	}
	fmt.Fprintf(progress, "waiting up to %s for Sync %s to be Ready...\n", h.timeout, r.Sync)
	s, err := h.waitReady(ctx, client.ObjectKeyFromObject(m.Sync))
	if err != nil {
		return err
	}
	r.Ready = true
	// Flux lists an object it skipped (its reconcile disabled) and never creates it; Argo CD
	// lists objects it has yet to create (a later wave, a manual sync): only Flux's list
	// may name an object that is not in the cluster without the move waiting for it.
	absentIsSkipped := m.old.GetKind() != argoApplication.kind
	if r.Missing, r.LeftAlone, err = h.missing(ctx, s, m.Applied, absentIsSkipped); err != nil {
		return err
	}
	if len(r.Missing) > 0 {
		return fmt.Errorf("Ready, but its inventory does not list %d objects %s applied: %s",
			len(r.Missing), m.From, strings.Join(r.Missing, ", "))
	}
	if err := h.suspendOld(ctx, m.old); err != nil {
		return err
	}
	r.Suspended = true
	return nil
}

// waitReady waits until the Sync is Ready for its current generation.
func (h *handover) waitReady(ctx context.Context, key client.ObjectKey) (*v1alpha1.Sync, error) {
	s := &v1alpha1.Sync{}
	why := "not reconciled yet"
	err := wait.PollUntilContextTimeout(ctx, time.Second, h.timeout, true, func(ctx context.Context) (bool, error) {
		if err := h.c.Get(ctx, key, s); err != nil {
			why = err.Error()
			return false, nil
		}
		c := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
		if c != nil {
			why = fmt.Sprintf("Ready=%s %s: %s", c.Status, c.Reason, c.Message)
		}
		return c != nil && c.Status == metav1.ConditionTrue && s.Status.ObservedGeneration == s.Generation, nil
	})
	if err != nil {
		return nil, fmt.Errorf("not Ready within %s (%s)", h.timeout, why)
	}
	return s, nil
}

// missing returns the IDs of applied that the Sync's stored inventory does not list and
// the move must wait for, and those it need not wait for, each with why (leftAlone).
func (h *handover) missing(ctx context.Context, s *v1alpha1.Sync, applied []string, absentIsSkipped bool) (missing, leftAlone []string, err error) {
	if s.Status.Inventory == nil || s.Status.Inventory.Name == "" {
		return applied, nil, nil
	}
	ref := inventory.Ref{Namespace: s.Namespace, Name: s.Status.Inventory.Name,
		ID: inventory.ID(inventory.OwnerSync, s.Namespace, s.Name)}
	inv, err := inventory.NewStore(h.c).Get(ctx, ref)
	if err != nil {
		return nil, nil, fmt.Errorf("read its inventory: %w", err)
	}
	for _, id := range applied {
		o, err := object.ParseObjMetadata(id)
		if err == nil && inv.Has(o) {
			continue
		}
		if err == nil {
			if why := h.leftAlone(ctx, o, absentIsSkipped); why != "" {
				leftAlone = append(leftAlone, id+" ("+why+")")
				continue
			}
		}
		missing = append(missing, id)
	}
	return missing, leftAlone, nil
}

// leftAlone says why the move need not wait for the Sync to list o, which the old tool
// listed: the live object carries an annotation that makes the Sync leave it alone
// (engine.LeftAloneBy: Flux's reconcile: disabled, ssa: Ignore, or Converge's own), or it
// is not in the cluster while absentIsSkipped (Flux skipped it, as it does an object whose
// reconcile is disabled: there is nothing to hand over, prune or fight over; the API
// server's 404 must name the object, not the resource). "" otherwise, and when o cannot be
// read.
func (h *handover) leftAlone(ctx context.Context, o object.ObjMetadata, absentIsSkipped bool) string {
	mapping, err := h.c.RESTMapper().RESTMapping(o.GroupKind)
	if err != nil {
		return ""
	}
	live := &metav1.PartialObjectMetadata{}
	live.SetGroupVersionKind(mapping.GroupVersionKind)
	err = h.c.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: o.Name}, live)
	var status apierrors.APIStatus
	switch {
	case apierrors.IsNotFound(err) && absentIsSkipped && errors.As(err, &status) &&
		status.Status().Details != nil && status.Status().Details.Name == o.Name:
		return "not in the cluster"
	case err != nil:
		return ""
	}
	if key := engine.LeftAloneBy(live.GetAnnotations()); key != "" {
		return "left alone: " + key
	}
	return ""
}

// suspendOld suspends a Flux Kustomization, or turns off an Application's automated sync.
func (h *handover) suspendOld(ctx context.Context, old *unstructured.Unstructured) error {
	k, patch := fluxKustomization, `{"spec":{"suspend":true}}`
	if old.GetKind() == argoApplication.kind {
		k, patch = argoApplication, `{"spec":{"syncPolicy":{"automated":null}}}`
	}
	gvr := old.GroupVersionKind().GroupVersion().WithResource(k.resource)
	_, err := h.dc.Resource(gvr).Namespace(old.GetNamespace()).Patch(ctx, old.GetName(), types.MergePatchType, []byte(patch),
		metav1.PatchOptions{FieldManager: engine.FieldManager})
	if err != nil {
		return fmt.Errorf("suspend %s: %w", describeObject(old), err)
	}
	return nil
}

// suspendedWords says what suspending the old object did.
func suspendedWords(from string) string {
	if strings.HasPrefix(from, argoApplication.kind+" ") {
		return "automated sync turned off"
	}
	return "suspended"
}
