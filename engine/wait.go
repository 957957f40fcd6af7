package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/polling"
	"github.com/fluxcd/cli-utils/pkg/kstatus/polling/event"
	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	fluxobject "github.com/fluxcd/cli-utils/pkg/object"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/object"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// defaultTimeout bounds waits when ApplyOptions.Timeout is zero.
const defaultTimeout = 5 * time.Minute

// wait polls kstatus for ids until all are Current, one is Failed, or timeout passes. It
// returns the last status of every object, in ids order, and an error naming each object
// that is not Current with kstatus' message.
//
// prog hears how many objects are Current as that changes. Objects in w.byMeta are read as
// metadata only (readyOnExistence); an object is Current only once it is read at least at
// its generation in w.applied (atGeneration).
func (e *Engine) wait(ctx context.Context, w waitSet, timeout time.Duration, prog *progress) ([]ObjectHealth, error) {
	ids := w.ids
	if len(ids) == 0 {
		return nil, nil
	}
	if timeout <= 0 {
		timeout = defaultTimeout
	}
	for id := range w.byMeta {
		if w.health.judges(id.GroupKind) {
			delete(w.byMeta, id) // its expressions read the whole object
		}
	}
	set := make(fluxobject.ObjMetadataSet, 0, len(ids))
	for _, id := range ids {
		set = append(set, toFlux(id))
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	latest := make(map[object.ObjMetadata]*event.ResourceStatus, len(ids))
	var pollErr error
	finished, current := false, 0
	for ev := range e.newPoller(w).Poll(wctx, set, polling.PollOptions{PollInterval: e.opts.PollInterval}) {
		switch ev.Type {
		case event.ErrorEvent:
			pollErr = ev.Error
			cancel()
		case event.ResourceUpdateEvent:
			id := fromFlux(ev.Resource.Identifier)
			if prev := latest[id]; prev != nil && prev.Status == status.CurrentStatus {
				current--
			}
			latest[id] = ev.Resource
			if ev.Resource.Status == status.CurrentStatus {
				current++
				prog.set(current)
			}
			// Settled: every object is Current, or one Failed.
			if current == len(ids) || ev.Resource.Status == status.FailedStatus {
				finished = true
				cancel()
			}
		}
	}
	health := make([]ObjectHealth, 0, len(ids))
	var errs []error
	for _, id := range ids {
		h := ObjectHealth{ID: id.String(), Object: id, Status: status.UnknownStatus.String()}
		if rs := latest[id]; rs != nil {
			h.Status, h.Message = rs.Status.String(), rs.Message
			if rs.Error != nil {
				h.Message = rs.Error.Error()
			}
		}
		health = append(health, h)
		if h.Status != status.CurrentStatus.String() {
			errs = append(errs, fmt.Errorf("%s: wait: status %s: %s", Describe(id), h.Status, h.Message))
		}
	}
	switch {
	case pollErr != nil:
		errs = append(errs, fmt.Errorf("wait: %w", pollErr))
	case !finished && ctx.Err() != nil:
		errs = append(errs, fmt.Errorf("wait: %w", ctx.Err()))
	case !finished:
		errs = append([]error{fmt.Errorf("wait: timeout after %s, %d of %d objects not Current",
			timeout, len(errs), len(ids))}, errs...)
	}
	return health, errors.Join(errs...)
}

// waitSet is what wait waits for.
type waitSet struct {
	ids []object.ObjMetadata
	// byMeta are the objects whose readiness their metadata shows (readyOnExistence).
	byMeta map[object.ObjMetadata]bool
	// applied is, per object, the metadata.generation the run's apply (or read) returned:
	// a copy of an older generation is not judged (atGeneration).
	applied map[object.ObjMetadata]int64
	// health judges the kinds that have CEL expressions (ApplyOptions.HealthExprs); nil
	// leaves every kind to kstatus. Objects of those kinds are never read as metadata only.
	health *HealthRules
}

// waitEstablished waits until the named CRDs report Established and the kinds of pending
// items resolve through the RESTMapper (which re-discovers on a miss).
func (e *Engine) waitEstablished(ctx context.Context, crds []string, pending []*item, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = defaultTimeout
	}
	var last error
	check := func(ctx context.Context) (bool, error) {
		for _, name := range crds {
			crd := &unstructured.Unstructured{}
			crd.SetGroupVersionKind(crdGK.WithVersion("v1"))
			if err := e.client.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
				last = fmt.Errorf("CRD %s: %w", name, err)
				return false, nil
			}
			if !established(crd) {
				last = fmt.Errorf("CRD %s is not Established", name)
				return false, nil
			}
		}
		for _, it := range pending {
			gvk := it.obj.GroupVersionKind()
			if _, err := e.mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
				if !meta.IsNoMatchError(err) {
					return false, err
				}
				last = fmt.Errorf("kind %s is not served yet: %w", gvk, err)
				return false, nil
			}
		}
		return true, nil
	}
	// A new CRD is usually Established within a few hundred milliseconds, and every object of
	// the next stage waits for it: poll soon at first (20 ms, doubling), then every 250 ms.
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for delay := 20 * time.Millisecond; ; delay = min(2*delay, 250*time.Millisecond) {
		ok, err := check(wctx)
		if err != nil || ok {
			return err
		}
		select {
		case <-wctx.Done():
			if last != nil {
				return fmt.Errorf("wait for CRDs: %v: %w", last, wctx.Err()) // the NoMatch in last is transient here
			}
			return wctx.Err()
		case <-time.After(delay):
		}
	}
}

// established reports the Established=True condition of a CRD.
func established(crd *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if ok && m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}
