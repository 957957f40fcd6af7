package shard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/converge-dev/converge/cmd/converge/daemon/fence"
)

// errShardNotHeld refuses a write made for a Sync of a shard this replica does not hold
// validly: it was released or lost, or its Lease was not renewed within the renew deadline
// (another replica may own the shard by now).
var errShardNotHeld = errors.New("shard fence: this replica no longer holds the shard of this Sync")

// shardKey is the context key of the shard of the Sync a reconcile is for.
type shardKey struct{}

// shardCall is what a reconcile's context carries: its Sync's shard, and whether the shard
// fence refused one of its writes.
type shardCall struct {
	i       int
	refused atomic.Bool
}

// withShard returns ctx naming shard i: the shard fence checks every write made with it.
func withShard(ctx context.Context, i int) context.Context {
	return context.WithValue(ctx, shardKey{}, &shardCall{i: i})
}

// shardRefused reports whether the shard fence refused (or cancelled) a write made with ctx
// or a context derived from it: the reconcile's outcome is then not its own to record (its
// applies failed for want of the shard, not for anything in the Sync) and it must write no
// status, even if the shard is writable again by then (a renewal answered late).
func shardRefused(ctx context.Context) bool {
	c, ok := ctx.Value(shardKey{}).(*shardCall)
	return ok && c.refused.Load()
}

// Check is the shard fence, the check of a fence.Guard at the transport: a mutating
// request whose context names a shard (the reconcile of a Sync of it: apply, prune, status,
// finalizer) is refused before it is sent unless the shard is still held validly, and
// cancelled if still unanswered when that holding of the shard ends (not renewed within the
// renew deadline, lost, or given up and taken again: the other replicas wait the longer
// lease duration before taking it). Requests without a shard (the Leases themselves, the
// webhook's annotation, the CRD) pass; the Guard lets reads pass.
func (t *Table) Check(req *http.Request) (holds func() (time.Duration, error), err error) {
	call, ok := req.Context().Value(shardKey{}).(*shardCall)
	if !ok {
		return nil, nil
	}
	i, epoch := call.i, t.epoch(call.i)
	return func() (time.Duration, error) {
		if left := t.validFor(i); left > 0 && t.epoch(i) == epoch {
			return left, nil
		}
		call.refused.Store(true)
		return 0, fmt.Errorf("%w (shard %d)", errShardNotHeld, i)
	}, nil
}

// Wrap is the shard fence at a transport, for rest.Config.Wrap.
func (t *Table) Wrap(rt http.RoundTripper) http.RoundTripper {
	return fence.Guard{Check: t.Check, Next: rt}
}
