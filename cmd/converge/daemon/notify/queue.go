package notify

import "sync"

// queue is the bounded FIFO of deliveries waiting for a worker. It drops the oldest to make
// room, and takes that oldest from the sender's own namespace when the namespace holds its
// share: one tenant's flood drops its own notifications, never another's, and the newest
// delivery, which says what a Sync is now, is always kept.
type queue struct {
	size, share int
	// ready holds at least one token per queued delivery; a worker takes a token, then a
	// delivery, if any is left (a dropped delivery leaves its token behind).
	ready chan struct{}

	mu    sync.Mutex
	items []*delivery
	perNS map[string]int
}

func newQueue(size, share int) *queue {
	return &queue{size: size, share: share, ready: make(chan struct{}, size), perNS: map[string]int{}}
}

// push queues x and returns the delivery it dropped to make room, if any.
func (q *queue) push(x *delivery) (dropped *delivery) {
	q.mu.Lock()
	defer q.mu.Unlock()
	ns := x.e.Namespace
	switch {
	case q.perNS[ns] >= q.share:
		dropped = q.removeLocked(q.oldestLocked(ns))
	case len(q.items) >= q.size:
		dropped = q.removeLocked(0)
	}
	q.addLocked(x)
	return dropped
}

// pushRetry queues x only if that drops nothing; it reports whether x was queued.
func (q *queue) pushRetry(x *delivery) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.perNS[x.e.Namespace] >= q.share || len(q.items) >= q.size {
		return false
	}
	q.addLocked(x)
	return true
}

// pop takes the oldest delivery, nil if none is left.
func (q *queue) pop() *delivery {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return nil
	}
	return q.removeLocked(0)
}

func (q *queue) addLocked(x *delivery) {
	q.items = append(q.items, x)
	q.perNS[x.e.Namespace]++
	select {
	case q.ready <- struct{}{}:
	default: // as many tokens as the queue holds deliveries already
	}
}

func (q *queue) oldestLocked(ns string) int {
	for i, x := range q.items {
		if x.e.Namespace == ns {
			return i
		}
	}
	return 0 // unreachable while perNS counts the items
}

func (q *queue) removeLocked(i int) *delivery {
	x := q.items[i]
	q.items = append(q.items[:i], q.items[i+1:]...)
	if q.perNS[x.e.Namespace]--; q.perNS[x.e.Namespace] <= 0 {
		delete(q.perNS, x.e.Namespace)
	}
	return x
}
