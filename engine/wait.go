package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/polling"
	"github.com/fluxcd/cli-utils/pkg/kstatus/polling/event"
	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	fluxobject "github.com/fluxcd/cli-utils/pkg/object"
	"sigs.k8s.io/cli-utils/pkg/object"
)

// defaultTimeout bounds waits when ApplyOptions.Timeout is zero.
const defaultTimeout = 5 * time.Minute

// waitFor says how long wait waits: until timeout (zero: defaultTimeout), or, with once,
// only for one read of every object.
type waitFor struct {
	timeout time.Duration
	once    bool
}

// wait polls kstatus for ids until all are Current, one is Failed, or the timeout passes. It
// returns the last status of every object, in ids order, and an error naming each object
// that is not Current with kstatus' message. With f.once it stops after the first read of
// every object and names only the Failed ones: the others are not ready yet, which is no
// error for a caller that judges again later.
//
// prog hears how many objects are Current as that changes. Objects in w.byMeta are read as
// metadata only (readyOnExistence); an object is Current only once it is read at least at
// its generation in w.applied (atGeneration).
func (e *Engine) wait(ctx context.Context, w waitSet, f waitFor, prog *progress) ([]ObjectHealth, error) {
	ids := w.ids
	if len(ids) == 0 {
		return nil, nil
	}
	timeout := f.timeout
	if timeout <= 0 {
		timeout = defaultTimeout
	}
	for id := range w.byMeta {
		if w.health.judges(id.GroupKind) {
			delete(w.byMeta, id) // its expressions read the whole object
		}
	}
	latest, finished, pollErr := e.poll(ctx, w, f.once, timeout, prog)
	health, errs := healthReport(ids, latest, f.once)
	switch {
	case pollErr != nil:
		errs = append(errs, fmt.Errorf("wait: %w", pollErr))
	case f.once && finished:
	case !finished && ctx.Err() != nil:
		errs = append(errs, fmt.Errorf("wait: %w", ctx.Err()))
	case !finished:
		errs = append([]error{fmt.Errorf("wait: timeout after %s, %d of %d objects not Current",
			timeout, len(errs), len(ids))}, errs...)
	}
	return health, errors.Join(errs...)
}

// poll polls kstatus for w.ids until all are Current, one is Failed, (once) each was read,
// or timeout passes, and returns the last status of each object read, whether the wait
// settled (finished) before it ended, and the poller's error.
func (e *Engine) poll(ctx context.Context, w waitSet, once bool, timeout time.Duration, prog *progress) (
	latest map[object.ObjMetadata]*event.ResourceStatus, finished bool, pollErr error) {
	ids := w.ids
	set := make(fluxobject.ObjMetadataSet, 0, len(ids))
	for _, id := range ids {
		set = append(set, toFlux(id))
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	latest = make(map[object.ObjMetadata]*event.ResourceStatus, len(ids))
	current := 0
	for ev := range e.newPoller(w).Poll(wctx, set, polling.PollOptions{PollInterval: e.opts.PollInterval}) {
		switch ev.Type {
		case event.ErrorEvent:
			pollErr = ev.Error
			cancel()
		case event.ResourceUpdateEvent:
			if cutShort(ev.Resource) {
				continue // says nothing of the object: its last status stands
			}
			id := fromFlux(ev.Resource.Identifier)
			if prev := latest[id]; prev != nil && prev.Status == status.CurrentStatus {
				current--
			}
			latest[id] = ev.Resource
			if ev.Resource.Status == status.CurrentStatus {
				current++
				prog.set(current)
			}
			// Settled: every object is Current, or one Failed, or (once) each was read.
			if current == len(ids) || ev.Resource.Status == status.FailedStatus || (once && len(latest) == len(ids)) {
				finished = true
				cancel()
			}
		}
	}
	return latest, finished, pollErr
}

// healthReport is the health of each of ids from its last status (latest), and an error for
// each that is not Current (once: only for the Failed ones).
func healthReport(ids []object.ObjMetadata, latest map[object.ObjMetadata]*event.ResourceStatus, once bool) ([]ObjectHealth, []error) {
	health := make([]ObjectHealth, 0, len(ids))
	var errs []error
	for _, id := range ids {
		h := ObjectHealth{ID: id.String(), Object: id, Status: status.UnknownStatus.String()}
		if rs := latest[id]; rs != nil {
			h.Status, h.Message = rs.Status.String(), rs.Message
			if rs.Error != nil {
				h.Message = rs.Error.Error()
			}
		} else {
			h.Message = "not read before the wait ended"
		}
		health = append(health, h)
		if h.Status != status.CurrentStatus.String() && (!once || h.Status == status.FailedStatus.String()) {
			errs = append(errs, fmt.Errorf("%s: wait: status %s: %s", Describe(id), h.Status, h.Message))
		}
	}
	return health, errs
}

// cutShort reports whether rs is the error of a read the wait's own end cut short: its
// context ended, or the client's rate limiter refused to wait past its deadline ("client
// rate limiter Wait returned an error: rate: Wait(n=1) would exceed context deadline").
func cutShort(rs *event.ResourceStatus) bool {
	if rs == nil || rs.Error == nil {
		return false
	}
	err := rs.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		strings.Contains(err.Error(), "rate limiter Wait returned an error")
}

// waitSet is what wait waits for.
type waitSet struct {
	ids []object.ObjMetadata
	// byMeta are the objects whose readiness their metadata shows (readyOnExistence).
	byMeta map[object.ObjMetadata]bool
	// external are the objects the set does not apply (addHealthChecks): read from the API
	// server, never through the watch cache (readinessReader).
	external map[object.ObjMetadata]bool
	// applied is, per object, the metadata.generation the run's apply (or read) returned:
	// a copy of an older generation is not judged (atGeneration).
	applied map[object.ObjMetadata]int64
	// health judges the kinds that have CEL expressions (ApplyOptions.HealthExprs); nil
	// leaves every kind to kstatus. Objects of those kinds are never read as metadata only.
	health *HealthRules
}
