package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"golang.org/x/sync/errgroup"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// syncNamespace holds every Sync of the daemon mode and their inventories. It is not part
// of the workload, so deleting the workload never deletes a Sync's home.
const syncNamespace = "bench-daemon"

// syncSpec is one Sync to create: its name and git path, and whether that path is a Helm
// chart (rendered with spec.source.helm, no field set).
type syncSpec struct {
	name, path string
	chart      bool
}

// newSyncClient returns a client that knows Syncs (and core objects) and can watch them.
func newSyncClient(cfg *rest.Config) (client.WithWatch, error) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := corev1.AddToScheme(scheme); err != nil { // -parity's ConfigMap
		return nil, err
	}
	return client.NewWithWatch(cfg, client.Options{Scheme: scheme})
}

// syncTemplate is what every Sync of a run shares.
type syncTemplate struct {
	repoURL  string
	interval time.Duration
	// parity makes a Sync depend on the base Sync and substitute the workload's variables
	// (parityVars, and the ConfigMap parityConfigMap), as a Flux user's Kustomization would.
	parity bool
	// day2 makes a measured Sync report drift, roll back by itself and notify (a generic
	// webhook on RolledBack, which a run never causes): what a Sync of a team that watches
	// its history carries.
	day2 bool
}

// The variables of -parity: one from spec.postBuild.substitute, one from a ConfigMap.
const (
	parityConfigMap = "bench-vars"
	parityTierVar   = "bench_tier"
	parityRegionVar = "bench_region"
)

// newSync returns the Sync of s on the template's repository, main branch: prune on, no
// readiness wait (the API profile runs no controllers, so a Deployment would never become
// available), objects deleted with the Sync.
func newSync(s syncSpec, t syncTemplate) *v1alpha1.Sync {
	sync := &v1alpha1.Sync{
		ObjectMeta: metav1.ObjectMeta{Namespace: syncNamespace, Name: s.name},
		Spec: v1alpha1.SyncSpec{
			Source:         v1alpha1.Source{Git: &v1alpha1.GitSource{URL: t.repoURL, Ref: v1alpha1.GitRef{Branch: "main"}}},
			Path:           s.path,
			Interval:       metav1.Duration{Duration: t.interval},
			Prune:          true,
			Wait:           false,
			DeletionPolicy: v1alpha1.DeletionPolicyDelete,
		},
	}
	if s.chart {
		sync.Spec.Source.Helm = &v1alpha1.HelmSource{}
	}
	if t.day2 && s.name != baseSyncName {
		sync.Spec.DriftPolicy, sync.Spec.AutoRollback = v1alpha1.DriftReport, true
		sync.Spec.Notifications = []v1alpha1.Notification{{Type: "generic", Address: "https://hooks.bench.invalid/converge",
			On: []v1alpha1.NotificationTransition{"RolledBack"}}}
	}
	if t.parity && s.name != baseSyncName {
		sync.Spec.DependsOn = []v1alpha1.DependencyReference{{Name: baseSyncName}}
		sync.Spec.PostBuild = &v1alpha1.PostBuild{
			Substitute:     map[string]string{parityTierVar: "gold"},
			SubstituteFrom: []v1alpha1.SubstituteReference{{Kind: "ConfigMap", Name: parityConfigMap}},
			Strict:         true,
		}
	}
	return sync
}

// syncReady reports whether s is Ready at revision for its current generation.
func syncReady(s *v1alpha1.Sync, revision string) bool {
	return s.Status.ObservedGeneration == s.Generation && s.Status.LastAppliedRevision == revision &&
		meta.IsStatusConditionTrue(s.Status.Conditions, v1alpha1.ConditionReady)
}

// syncWatch follows the Syncs of syncNamespace and records when each wanted one is first
// seen Ready at a revision, and the first failure each reported before that.
type syncWatch struct {
	c        client.WithWatch
	revision string
	start    time.Time
	want     map[string]bool
	ready    map[string]time.Duration
	failed   map[string]string // name → "reason: message" of its first Ready=False
	last     map[string]*v1alpha1.Sync
	w        watch.Interface
}

// openSyncWatch lists and starts watching the Syncs; names are the ones to wait for.
// Times are measured from start.
func openSyncWatch(ctx context.Context, c client.WithWatch, names []string, revision string, start time.Time) (*syncWatch, error) {
	sw := &syncWatch{c: c, revision: revision, start: start, want: map[string]bool{},
		ready: map[string]time.Duration{}, failed: map[string]string{}, last: map[string]*v1alpha1.Sync{}}
	for _, n := range names {
		sw.want[n] = true
	}
	return sw, sw.open(ctx)
}

// open lists the Syncs, observes each, and watches from the list's resourceVersion.
func (sw *syncWatch) open(ctx context.Context) error {
	list := &v1alpha1.SyncList{}
	if err := sw.c.List(ctx, list, client.InNamespace(syncNamespace)); err != nil {
		return fmt.Errorf("list Syncs: %w", err)
	}
	for i := range list.Items {
		sw.observe(&list.Items[i])
	}
	w, err := sw.c.Watch(ctx, &v1alpha1.SyncList{}, client.InNamespace(syncNamespace),
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
	if err != nil {
		return fmt.Errorf("watch Syncs: %w", err)
	}
	sw.w = w
	return nil
}

// observe records what s says.
func (sw *syncWatch) observe(s *v1alpha1.Sync) {
	if !sw.want[s.Name] {
		return
	}
	sw.last[s.Name] = s
	if _, done := sw.ready[s.Name]; done {
		return
	}
	if syncReady(s, sw.revision) {
		sw.ready[s.Name] = time.Since(sw.start)
		return
	}
	if c := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady); c != nil &&
		c.Status == metav1.ConditionFalse && sw.failed[s.Name] == "" && s.Status.ObservedGeneration == s.Generation {
		sw.failed[s.Name] = c.Reason + ": " + truncateString(c.Message, 300)
	}
}

// wait consumes events until every wanted Sync was Ready, re-opening the watch when the API
// server ends it. It returns an error naming the Syncs not Ready after timeout.
func (sw *syncWatch) wait(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	defer func() { sw.w.Stop() }()
	for len(sw.ready) < len(sw.want) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d Syncs not Ready at %s after %s: %s", len(sw.want)-len(sw.ready), len(sw.want),
				sw.revision, timeout, sw.pending())
		case ev, ok := <-sw.w.ResultChan():
			if !ok || ev.Type == watch.Error {
				sw.w.Stop()
				if err := sw.open(ctx); err != nil {
					return err
				}
				continue
			}
			if s, ok := ev.Object.(*v1alpha1.Sync); ok && ev.Type != watch.Deleted {
				sw.observe(s)
			}
		}
	}
	return nil
}

// pending describes up to five Syncs that are not Ready yet, with their Ready condition.
func (sw *syncWatch) pending() string {
	var names []string
	for n := range sw.want {
		if _, ok := sw.ready[n]; !ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var parts []string
	for _, n := range names[:min(5, len(names))] {
		desc := "never seen"
		if s := sw.last[n]; s != nil {
			desc = fmt.Sprintf("generation %d observed %d, applied %q", s.Generation, s.Status.ObservedGeneration, s.Status.LastAppliedRevision)
			if c := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady); c != nil {
				desc += fmt.Sprintf(", Ready=%s %s: %s", c.Status, c.Reason, truncateString(c.Message, 300))
			}
		}
		parts = append(parts, n+" ("+desc+")")
	}
	return strings.Join(parts, "; ")
}

// readySeconds returns the ready times in seconds, sorted.
func (sw *syncWatch) readySeconds() []float64 {
	out := make([]float64, 0, len(sw.ready))
	for _, d := range sw.ready {
		out = append(out, d.Seconds())
	}
	slices.Sort(out)
	return out
}

// createParallelism is how many Syncs are created at once: creating 100 one after the other
// takes over a second here, which would be counted against the daemon.
const createParallelism = 8

// createSyncs creates the Syncs, createParallelism at a time.
func createSyncs(ctx context.Context, c client.Client, specs []syncSpec, t syncTemplate) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(createParallelism)
	for _, s := range specs {
		g.Go(func() error {
			if err := c.Create(ctx, newSync(s, t)); err != nil {
				return fmt.Errorf("create Sync %s: %w", s.name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// deleteSyncs deletes the Syncs and waits until the daemon has applied their deletion
// policy (deleted every object of their inventories) and dropped their finalizers.
func deleteSyncs(ctx context.Context, c client.Client, specs []syncSpec, timeout time.Duration) error {
	for _, s := range specs {
		err := c.Delete(ctx, &v1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: syncNamespace, Name: s.name}})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete Sync %s: %w", s.name, err)
		}
	}
	want := map[string]bool{}
	for _, s := range specs {
		want[s.name] = true
	}
	left := 0
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		list := &v1alpha1.SyncList{}
		if err := c.List(ctx, list, client.InNamespace(syncNamespace)); err != nil {
			return false, nil
		}
		left = 0
		for _, s := range list.Items {
			if want[s.Name] {
				left++
			}
		}
		return left == 0, nil
	})
	if err != nil {
		return fmt.Errorf("%d Syncs still there after %s: %w", left, timeout, err)
	}
	return nil
}

// ensureBaseSync creates the base Sync unless it exists.
func ensureBaseSync(ctx context.Context, c client.Client, t syncTemplate) error {
	if t.parity {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: syncNamespace, Name: parityConfigMap},
			Data: map[string]string{parityRegionVar: "eu-west"}}
		if err := c.Create(ctx, cm); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	err := c.Create(ctx, newSync(syncSpec{name: baseSyncName, path: baseFolder}, t))
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// baseSyncName is the Sync that owns the CRD.
const baseSyncName = "bench-base"

// sweepParallelism is how many tenant namespaces the sweep works on at once: 1,000 of them
// one after the other, each a request per kind, took minutes on a loaded machine.
const sweepParallelism = 16

// sweepTenants makes sure the tenant namespaces are gone once their Syncs are: it reports
// (and deletes) workload objects the daemon left in them, then finalizes the Terminating
// Namespaces (the API profile runs no namespace controller) and waits until they are gone.
// It works on sweepParallelism namespaces at once, and each wait round checks only the
// namespaces not yet gone, finalizing every Terminating one: O(namespaces) requests, where
// finalizing one namespace per round cost O(namespaces²) requests and a round per namespace.
func (a *admin) sweepTenants(ctx context.Context, namespaces []string, timeout time.Duration) (int, error) {
	var leftover atomic.Int64
	var mu sync.Mutex
	var errs []error
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(sweepParallelism)
	for _, ns := range namespaces {
		g.Go(func() error {
			n, err := a.sweepNamespace(gctx, ns)
			leftover.Add(int64(n))
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			return nil
		})
	}
	_ = g.Wait()
	if err := errors.Join(errs...); err != nil {
		return int(leftover.Load()), err
	}
	left := slices.Clone(namespaces)
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		gone := make([]bool, len(left))
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(sweepParallelism)
		for i, ns := range left {
			g.Go(func() error {
				var err error
				gone[i], err = a.namespaceGone(gctx, ns)
				return err
			})
		}
		if err := g.Wait(); err != nil {
			return false, err
		}
		var still []string
		for i, ns := range left {
			if !gone[i] {
				still = append(still, ns)
			}
		}
		left = still
		return len(left) == 0, nil
	})
	if err != nil {
		return int(leftover.Load()), fmt.Errorf("tenant namespaces not gone (%d left): %w", len(left), err)
	}
	return int(leftover.Load()), nil
}

// sweepNamespace deletes the workload objects left in ns, returning how many, and ns itself.
func (a *admin) sweepNamespace(ctx context.Context, ns string) (int, error) {
	leftover := 0
	var errs []error
	for _, gvk := range leafGVKs {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := a.c.List(ctx, list, client.InNamespace(ns)); err != nil {
			if !meta.IsNoMatchError(err) {
				errs = append(errs, fmt.Errorf("sweep %s in %s: %w", gvk.Kind, ns, err))
			}
			continue
		}
		if len(list.Items) == 0 {
			continue
		}
		leftover += len(list.Items)
		if err := a.deleteAll(ctx, ns, gvk); err != nil {
			errs = append(errs, fmt.Errorf("sweep %s in %s: %w", gvk.Kind, ns, err))
		}
	}
	err := a.c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	if err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("sweep namespace %s: %w", ns, err))
	}
	return leftover, errors.Join(errs...)
}

// namespaceGone reports whether Namespace name is deleted, finalizing it when it is
// Terminating and a.finalize is set.
func (a *admin) namespaceGone(ctx context.Context, name string) (bool, error) {
	ns, err := a.cs.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	if a.finalize && ns.DeletionTimestamp != nil && len(ns.Spec.Finalizers) > 0 {
		ns.Spec.Finalizers = nil
		_, err := a.cs.CoreV1().Namespaces().Finalize(ctx, ns, metav1.UpdateOptions{})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return false, err
		}
	}
	return false, nil
}
