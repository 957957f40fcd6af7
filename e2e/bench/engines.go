package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/polling"
	"github.com/fluxcd/pkg/ssa"
	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/inventory"
)

// The engines under test.
const (
	engineConverge = "converge"
	// engineWatch is converge with Options.Watch: a watch cache and a memo of what it
	// applied, run for the child's whole life as the daemon runs it.
	engineWatch = "converge-watch"
	engineFlux  = "flux-style"
	engineFloor = "floor"
)

// engines lists them in run order.
var engines = []string{engineConverge, engineWatch, engineFlux, engineFloor}

// concurrency is the number of requests in flight of converge's Apply and of the floor.
const concurrency = 16

// fluxConcurrency is kustomize-controller's default --concurrent-ssa: the parallelism of
// ApplyAll's GET + dry-run phase (its applies and DeleteAll stay serial).
const fluxConcurrency = 4

// inventoryRef is where converge keeps its inventory; its namespace is not part of the
// workload, so a cleanup never deletes it.
var inventoryRef = inventory.Ref{Namespace: "bench-system", Name: "bench-inventory", ID: "bench"}

// runner is one engine driven through the benchmark's operations.
type runner interface {
	// apply makes the cluster hold objs, the whole desired set.
	apply(ctx context.Context, objs []*unstructured.Unstructured) error
	// prune makes the cluster hold kept when dropped just left the desired set.
	prune(ctx context.Context, kept, dropped []*unstructured.Unstructured) error
}

// newRunner builds the named engine on cfg, the counted config. A watch-mode engine runs
// its cache until ctx ends.
func newRunner(ctx context.Context, name string, cfg *rest.Config) (runner, error) {
	switch name {
	case engineConverge, engineWatch:
		opts := engine.Options{Watch: name == engineWatch}
		var changes chan struct{}
		if opts.Watch {
			changes = make(chan struct{}, 1)
			opts.Changed = func(string) {
				select {
				case changes <- struct{}{}:
				default:
				}
			}
		}
		e, err := engine.New(cfg, opts)
		if err != nil {
			return nil, err
		}
		go func() {
			if err := e.Run(ctx); err != nil && ctx.Err() == nil {
				log.Printf("%s: watch cache: %v", name, err)
			}
		}()
		if opts.Watch {
			return &watchRunner{convergeRunner{e: e}, changes}, nil
		}
		return &convergeRunner{e: e}, nil
	case engineFlux, engineFloor:
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			return nil, err
		}
		mapper, err := apiutil.NewDynamicRESTMapper(cfg, hc)
		if err != nil {
			return nil, err
		}
		c, err := client.New(cfg, client.Options{HTTPClient: hc, Mapper: mapper})
		if err != nil {
			return nil, err
		}
		if name == engineFloor {
			return &floorRunner{c: c}, nil
		}
		m := ssa.NewResourceManager(c, polling.NewStatusPoller(c, mapper, polling.Options{}),
			ssa.Owner{Field: "flux-bench", Group: benchGroup})
		m.SetConcurrency(fluxConcurrency)
		return &fluxRunner{m: m}, nil
	}
	return nil, fmt.Errorf("unknown engine %q", name)
}

// convergeRunner drives engine.Apply with prune on, no readiness wait.
type convergeRunner struct{ e *engine.Engine }

// watchRunner is convergeRunner in watch mode, hearing of out-of-band changes.
type watchRunner struct {
	convergeRunner
	ch chan struct{}
}

func (w *watchRunner) changes() <-chan struct{} { return w.ch }

// options are the ApplyOptions of every converge run: prune, no readiness wait.
func (r *convergeRunner) options() engine.ApplyOptions {
	return engine.ApplyOptions{Prune: true, Wait: false, Timeout: 2 * time.Minute, Concurrency: concurrency}
}

// apply is one engine.Apply of objs; a per-object failure fails the operation.
func (r *convergeRunner) apply(ctx context.Context, objs []*unstructured.Unstructured) error {
	res, err := r.e.Apply(ctx, engine.Set{Inventory: inventoryRef, Objects: objs}, r.options())
	if err != nil {
		return fmt.Errorf("converge: %w", err)
	}
	if len(res.Changes) != len(objs) {
		return fmt.Errorf("converge: %d changes for %d objects", len(res.Changes), len(objs))
	}
	return nil
}

// prune is one engine.Apply of kept; it checks that exactly the dropped objects were pruned.
func (r *convergeRunner) prune(ctx context.Context, kept, dropped []*unstructured.Unstructured) error {
	res, err := r.e.Apply(ctx, engine.Set{Inventory: inventoryRef, Objects: kept}, r.options())
	if err != nil {
		return fmt.Errorf("converge: %w", err)
	}
	n := 0
	for _, c := range res.Pruned {
		if c.Action == engine.ActionPruned {
			n++
		}
	}
	if n != len(dropped) {
		return fmt.Errorf("converge: pruned %d objects, want %d", n, len(dropped))
	}
	return nil
}

// fluxRunner drives fluxcd/pkg/ssa as kustomize-controller does: ApplyAllStaged with the
// default options each reconcile, DeleteAll of what left the set.
type fluxRunner struct{ m *ssa.ResourceManager }

// apply is one ApplyAllStaged with ssa.DefaultApplyOptions, as a kustomize-controller reconcile.
func (r *fluxRunner) apply(ctx context.Context, objs []*unstructured.Unstructured) error {
	if _, err := r.m.ApplyAllStaged(ctx, objs, ssa.DefaultApplyOptions()); err != nil {
		return fmt.Errorf("flux-style: %w", err)
	}
	return nil
}

// prune is a whole kustomize-controller reconcile: apply what is kept, delete the rest.
func (r *fluxRunner) prune(ctx context.Context, kept, dropped []*unstructured.Unstructured) error {
	if err := r.apply(ctx, kept); err != nil {
		return err
	}
	if _, err := r.m.DeleteAll(ctx, dropped, ssa.DefaultDeleteOptions()); err != nil {
		return fmt.Errorf("flux-style: %w", err)
	}
	return nil
}

// floorRunner is a bare parallel server-side apply loop, CRDs and Namespaces first: what
// any engine must at least send to create the objects.
type floorRunner struct{ c client.Client }

// apply applies CRDs and Namespaces, waits for the CRDs, then applies the rest.
func (r *floorRunner) apply(ctx context.Context, objs []*unstructured.Unstructured) error {
	var first, rest []*unstructured.Unstructured
	var crds []string
	for _, u := range objs {
		switch u.GetKind() {
		case "CustomResourceDefinition":
			crds = append(crds, u.GetName())
			first = append(first, u)
		case "Namespace":
			first = append(first, u)
		default:
			rest = append(rest, u)
		}
	}
	if err := r.each(ctx, first, r.applyOne); err != nil {
		return err
	}
	if err := engine.WaitEstablished(ctx, r.c, crds, 2*time.Minute); err != nil {
		return err
	}
	return r.each(ctx, rest, r.applyOne)
}

// prune deletes the dropped objects in parallel, no GET first and no precondition.
func (r *floorRunner) prune(ctx context.Context, _, dropped []*unstructured.Unstructured) error {
	return r.each(ctx, dropped, func(ctx context.Context, u *unstructured.Unstructured) error {
		err := r.c.Delete(ctx, u, client.PropagationPolicy(metav1.DeletePropagationBackground))
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("floor: delete %s: %w", keyOf(u), err)
		}
		return nil
	})
}

// applyOne server-side applies u with field manager "floor", forcing conflicts.
func (r *floorRunner) applyOne(ctx context.Context, u *unstructured.Unstructured) error {
	err := r.c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u),
		client.FieldOwner("floor"), client.ForceOwnership)
	if err != nil {
		return fmt.Errorf("floor: apply %s: %w", keyOf(u), err)
	}
	return nil
}

// each runs fn over objs, concurrency at a time, and joins the errors.
func (r *floorRunner) each(ctx context.Context, objs []*unstructured.Unstructured,
	fn func(context.Context, *unstructured.Unstructured) error) error {
	errs := make([]error, len(objs))
	var g errgroup.Group
	g.SetLimit(concurrency)
	for i, u := range objs {
		g.Go(func() error {
			errs[i] = fn(ctx, u)
			return nil
		})
	}
	_ = g.Wait()
	return errors.Join(errs...)
}
