package engine

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// WaitEstablished waits until each named CRD reports Established=True, for at most timeout
// (zero: 5 minutes). It is the wait the engine does between stages, exported so a program
// that installs a CRD itself (the daemon's Sync CRD, tests, benchmarks) reads the condition
// the same way instead of writing its own poll.
func WaitEstablished(ctx context.Context, c client.Reader, names []string, timeout time.Duration) error {
	return pollCRDs(ctx, timeout, func(ctx context.Context) (error, error) {
		return notEstablished(ctx, c, names), nil
	})
}

// waitEstablished waits until the named CRDs report Established and the kinds of pending
// items resolve through the RESTMapper (which re-discovers on a miss).
func (e *Engine) waitEstablished(ctx context.Context, crds []string, pending []*item, timeout time.Duration) error {
	return pollCRDs(ctx, timeout, func(ctx context.Context) (error, error) {
		if notYet := notEstablished(ctx, e.client, crds); notYet != nil {
			return notYet, nil
		}
		for _, it := range pending {
			gvk := it.gvk
			if _, err := e.mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
				if !meta.IsNoMatchError(err) {
					return nil, err
				}
				return fmt.Errorf("kind %s is not served yet: %w", gvk, err), nil
			}
		}
		return nil, nil
	})
}

// pollCRDs calls check until it reports neither a reason to wait (notYet) nor an error, or
// timeout passes. A new CRD is usually Established within a few hundred milliseconds, and
// every object of the next stage waits for it: poll soon at first (20 ms, doubling), then
// every 250 ms.
func pollCRDs(ctx context.Context, timeout time.Duration, check func(context.Context) (notYet, err error)) error {
	if timeout <= 0 {
		timeout = defaultTimeout
	}
	var last error
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for delay := 20 * time.Millisecond; ; delay = min(2*delay, 250*time.Millisecond) {
		notYet, err := check(wctx)
		if err != nil || notYet == nil {
			return err
		}
		last = notYet
		select {
		case <-wctx.Done():
			return fmt.Errorf("wait for CRDs: %v: %w", last, wctx.Err()) // the NoMatch in last is transient here
		case <-time.After(delay):
		}
	}
}

// notEstablished returns why the first of the named CRDs that is not Established is not
// (it cannot be read, or its condition is not True), nil when all are.
func notEstablished(ctx context.Context, c client.Reader, names []string) error {
	for _, name := range names {
		crd := &unstructured.Unstructured{}
		crd.SetGroupVersionKind(crdGK.WithVersion("v1"))
		if err := c.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
			return fmt.Errorf("CRD %s: %w", name, err)
		}
		if !established(crd) {
			return fmt.Errorf("CRD %s is not Established", name)
		}
	}
	return nil
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
