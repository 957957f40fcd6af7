// Package checker evaluates the safety invariants of one Sync while a test scenario runs,
// with its own uncached client straight to the API server (never through the faults under
// test). It follows the ConfigMaps of the Sync's namespace and the Sync itself with watches
// and checks every event in order:
//
//   - I1, no foreign delete: an object that goes away (deletionTimestamp set, or deleted)
//     carried our owner annotation and was in the persisted inventory, with the recorded UID;
//   - I2, no inventory loss: at every resourceVersion of the namespace's ConfigMaps, each one
//     carrying our owner annotation is in the inventory;
//   - I11, ownership respected: an object whose owner annotation names another inventory
//     never changes to ours;
//   - I5, status never regresses: the Sync's observedGeneration never decreases and its
//     lastAppliedRevision never returns to a revision it left.
//
// One watch of one resource delivers its changes in resourceVersion order, so the state the
// checker rebuilds is the real state at each step: I1 and I2 are checked exactly, at every
// instant, for ConfigMaps. Objects of other kinds are not followed. Tests must not delete
// objects themselves while a checker runs. Production code must not import this package.
package checker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/cli-utils/pkg/object"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// OwnerAnnotation is the annotation whose value names the inventory that owns an object
// (engine.OwnerAnnotation; the checker does not import the engine it checks).
const OwnerAnnotation = "config.k8s.io/owning-inventory"

// fenceLabel marks the checker's own fence objects, which the invariants ignore.
const fenceLabel = "checker.converge.dev/fence"

// Options name what to check.
type Options struct {
	// Namespace holds the Sync, its inventory ConfigMap and the ConfigMaps it applies.
	Namespace string
	// Sync is the Sync's name, for I5; empty skips I5.
	Sync string
	// InventoryName is the inventory ConfigMap's name; InventoryID the owner annotation value.
	InventoryName, InventoryID string
}

// ForSync returns the options for the daemon's Sync name in namespace: its inventory is the
// ConfigMap <name>-inventory and its objects carry sync_<namespace>_<name> (inventory.ID of a
// Sync, spelled out here so the checker does not trust the code it checks; names short
// enough not to be hashed).
func ForSync(namespace, name string) Options {
	return Options{Namespace: namespace, Sync: name, InventoryName: name + "-inventory", InventoryID: "sync_" + namespace + "_" + name}
}

// Violation is one broken invariant, when the checker saw it.
type Violation struct {
	At              time.Time
	Invariant       string // "I1", "I2", "I5"
	Object          string
	ResourceVersion string
	Detail          string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s %s %s (resourceVersion %s): %s", v.At.Format("15:04:05.000"), v.Invariant, v.Object, v.ResourceVersion, v.Detail)
}

// Report is what a checker saw.
type Report struct {
	Violations []Violation
	// Events is how many watch events were checked; Gone how many objects went away.
	Events, Gone int
}

// Checker follows one Sync's namespace; see the package comment.
type Checker struct {
	opts   Options
	kube   kubernetes.Interface
	cancel context.CancelFunc
	done   chan struct{}
	fences int
	syncs  dynamic.ResourceInterface // nil without Options.Sync

	mu          sync.Mutex
	live        map[string]*corev1.ConfigMap // by name
	inventory   map[string]types.UID         // object ID → recorded UID; nil: no inventory
	failing     map[string]bool              // objects in an I2 violation now, reported once
	gone        map[types.UID]bool           // objects already checked for I1
	seen        map[string]bool              // fence names seen
	observedGen int64
	syncRV      string   // resourceVersion of the last Sync event checked
	revisions   []string // lastAppliedRevision history, without repeats
	report      Report
	err         error
}

// Start lists the namespace's ConfigMaps, checks them, and follows them and the Sync until
// Stop. cfg must reach the API server directly.
func Start(ctx context.Context, cfg *rest.Config, opts Options) (*Checker, error) {
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	c := &Checker{opts: opts, kube: kube, done: make(chan struct{}), live: map[string]*corev1.ConfigMap{},
		failing: map[string]bool{}, gone: map[types.UID]bool{}, seen: map[string]bool{}}
	cms := kube.CoreV1().ConfigMaps(opts.Namespace)
	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("checker: list configmaps: %w", err)
	}
	c.mu.Lock()
	for i := range list.Items { // the state as listed, then checked as a whole
		c.update(watch.Added, &list.Items[i])
	}
	c.checkOwnedInventoried(list.ResourceVersion)
	c.mu.Unlock()
	cmWatch, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return cms.Watch(ctx, o) },
	})
	if err != nil {
		return nil, err
	}
	ctx, c.cancel = context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { c.follow(ctx, cmWatch, c.applyEvent) })
	if opts.Sync != "" {
		syncs := dyn.Resource(v1alpha1.GroupVersion.WithResource("syncs")).Namespace(opts.Namespace)
		c.syncs = syncs
		first, err := syncs.List(ctx, metav1.ListOptions{}) // nil while the CRD is not served
		if err != nil {
			first = nil
		}
		wg.Go(func() { c.followSyncs(ctx, syncs, first) })
	}
	go func() { wg.Wait(); close(c.done) }()
	return c, nil
}

// follow hands the events of w to apply until ctx ends or w fails.
func (c *Checker) follow(ctx context.Context, w watch.Interface, apply func(watch.Event)) {
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.ResultChan():
			if ctx.Err() != nil {
				return
			}
			if !ok || ev.Type == watch.Error {
				c.fail(fmt.Errorf("watch ended: %v", ev.Object))
				return
			}
			apply(ev)
		}
	}
}

// followSyncs follows the Syncs from the list first, or, when the Sync resource was not served
// at Start (the daemon under test installs the CRD), from a list taken as soon as it is: a
// Sync's status changes in the moment between its creation and that list are not seen.
func (c *Checker) followSyncs(ctx context.Context, syncs dynamic.ResourceInterface, first *unstructured.UnstructuredList) {
	ul := first
	if ul == nil {
		err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			var err error
			ul, err = syncs.List(ctx, metav1.ListOptions{})
			return err == nil, nil
		})
		if err != nil {
			return // stopped before the resource was served
		}
	}
	for i := range ul.Items {
		c.applySync(&ul.Items[i])
	}
	w, err := watchtools.NewRetryWatcherWithContext(ctx, ul.GetResourceVersion(), &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return syncs.Watch(ctx, o) },
	})
	if err != nil {
		c.fail(err)
		return
	}
	c.follow(ctx, w, func(ev watch.Event) {
		if u, ok := ev.Object.(*unstructured.Unstructured); ok && ev.Type != watch.Deleted {
			c.applySync(u)
		}
	})
}

func (c *Checker) applyEvent(ev watch.Event) {
	if cm, ok := ev.Object.(*corev1.ConfigMap); ok {
		c.apply(ev.Type, cm)
	}
}

func (c *Checker) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
	}
}

// apply updates the state with one ConfigMap event and checks I1 and I2.
func (c *Checker) apply(typ watch.EventType, cm *corev1.ConfigMap) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.report.Events++
	if cm.Name != c.opts.InventoryName && cm.Labels[fenceLabel] == "" && (typ == watch.Deleted || cm.DeletionTimestamp != nil) {
		c.checkGone(cm)
	}
	c.checkTakeover(typ, cm)
	c.update(typ, cm)
	c.checkOwnedInventoried(cm.ResourceVersion)
}

// checkTakeover is I11: an object another inventory owned must not become ours; the caller
// holds c.mu and calls it before the state records cm.
func (c *Checker) checkTakeover(typ watch.EventType, cm *corev1.ConfigMap) {
	prev, ok := c.live[cm.Name]
	if !ok || typ == watch.Deleted || prev.UID != cm.UID {
		return
	}
	was, now := prev.Annotations[OwnerAnnotation], cm.Annotations[OwnerAnnotation]
	if was != "" && was != c.opts.InventoryID && now == c.opts.InventoryID {
		c.violate("I11", cm, fmt.Sprintf("owned by inventory %q, taken over by ours", was))
	}
}

// update records one ConfigMap event in the state; the caller holds c.mu.
func (c *Checker) update(typ watch.EventType, cm *corev1.ConfigMap) {
	switch {
	case cm.Labels[fenceLabel] != "":
		c.seen[cm.Name] = true
	case cm.Name == c.opts.InventoryName:
		c.inventory = nil
		if typ != watch.Deleted {
			c.inventory = map[string]types.UID{}
			for k, v := range cm.Data {
				c.inventory[k] = types.UID(v)
			}
		}
	case typ == watch.Deleted:
		delete(c.live, cm.Name)
	default:
		c.live[cm.Name] = cm
	}
}

// checkGone is I1 for an object that is going away.
func (c *Checker) checkGone(cm *corev1.ConfigMap) {
	if c.gone[cm.UID] {
		return
	}
	c.gone[cm.UID] = true
	c.report.Gone++
	id := idOf(cm)
	owner := cm.Annotations[OwnerAnnotation]
	uid, inInventory := c.inventory[id]
	switch {
	case owner != c.opts.InventoryID:
		c.violate("I1", cm, fmt.Sprintf("deleted, but its owner annotation is %q, not %q", owner, c.opts.InventoryID))
	case !inInventory:
		c.violate("I1", cm, "deleted, but not in the persisted inventory")
	case uid != "" && uid != cm.UID:
		c.violate("I1", cm, fmt.Sprintf("deleted with UID %s, but the inventory recorded %s", cm.UID, uid))
	}
}

// checkOwnedInventoried is I2 over the current state; each object is reported when it starts
// violating.
func (c *Checker) checkOwnedInventoried(rv string) {
	for name, cm := range c.live {
		if cm.Annotations[OwnerAnnotation] != c.opts.InventoryID {
			delete(c.failing, name)
			continue
		}
		if _, ok := c.inventory[idOf(cm)]; ok {
			delete(c.failing, name)
			continue
		}
		if !c.failing[name] {
			c.failing[name] = true
			c.violateAt("I2", name, rv, "live with our owner annotation, but not in the persisted inventory")
		}
	}
}

// applySync checks I5 on a new state of the Sync.
func (c *Checker) applySync(u *unstructured.Unstructured) {
	if u.GetName() != c.opts.Sync {
		return
	}
	gen, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
	rev, _, _ := unstructured.NestedString(u.Object, "status", "lastAppliedRevision")
	c.mu.Lock()
	defer c.mu.Unlock()
	c.report.Events++
	c.syncRV = u.GetResourceVersion()
	id := "Sync/" + u.GetName()
	if gen < c.observedGen {
		c.violateAt("I5", id, u.GetResourceVersion(), fmt.Sprintf("observedGeneration went back from %d to %d", c.observedGen, gen))
	}
	c.observedGen = max(c.observedGen, gen)
	if rev == "" || (len(c.revisions) > 0 && c.revisions[len(c.revisions)-1] == rev) {
		return
	}
	for _, old := range c.revisions {
		if old == rev {
			c.violateAt("I5", id, u.GetResourceVersion(), fmt.Sprintf("lastAppliedRevision went back to %s after %s", rev, strings.Join(c.revisions, ", ")))
		}
	}
	c.revisions = append(c.revisions, rev)
}

func (c *Checker) violate(inv string, cm *corev1.ConfigMap, detail string) {
	c.violateAt(inv, cm.Name+" (UID "+string(cm.UID)+")", cm.ResourceVersion, detail)
}

func (c *Checker) violateAt(inv, obj, rv, detail string) {
	c.report.Violations = append(c.report.Violations, Violation{At: time.Now(), Invariant: inv,
		Object: c.opts.Namespace + "/" + obj, ResourceVersion: rv, Detail: detail})
}

func idOf(cm *corev1.ConfigMap) string {
	return object.ObjMetadata{Namespace: cm.Namespace, Name: cm.Name, GroupKind: schema.GroupKind{Kind: "ConfigMap"}}.String()
}

// Fence creates a marker ConfigMap and waits until the checker's watch delivers it (and,
// with a Sync, until the Sync's watch has delivered the Sync as it is now), so every
// change made before the call has been checked.
func (c *Checker) Fence(ctx context.Context) error {
	c.fences++
	name := fmt.Sprintf("checker-fence-%d", c.fences)
	if c.opts.Sync != "" { // several checkers, one per Sync, may share a namespace
		name = fmt.Sprintf("checker-fence-%s-%d", c.opts.Sync, c.fences)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{fenceLabel: "true"}}}
	if _, err := c.kube.CoreV1().ConfigMaps(c.opts.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("checker: fence: %w", err)
	}
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.err != nil {
			return false, c.err
		}
		return c.seen[name], nil
	})
	if err != nil || c.syncs == nil {
		return err
	}
	// The Sync has its own watch: wait until it has delivered the Sync as it is now.
	return wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		u, err := c.syncs.Get(ctx, c.opts.Sync, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, nil
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.syncRV == u.GetResourceVersion() || c.err != nil, c.err
	})
}

// Stop fences, stops following and returns what the checker saw. An error means the checker
// could not follow the whole run, so the report does not cover it.
func (c *Checker) Stop(ctx context.Context) (Report, error) {
	fenceErr := c.Fence(ctx)
	c.cancel()
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.report
	r.Violations = append([]Violation(nil), r.Violations...)
	return r, errors.Join(fenceErr, c.err)
}
