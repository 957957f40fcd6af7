package webhook

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/lru"
)

// deliveries remembers, per Sync (by UID, so a recreated Sync starts afresh), the webhook
// deliveries it has handled within a window, so that a repeat of one triggers nothing.
// Memory is bounded twice: so many deliveries per Sync, so many Syncs, least recently used
// first out. Only authentic requests are recorded: a caller without the secret cannot fill it.
type deliveries struct {
	mu      sync.Mutex
	window  time.Duration
	perSync int
	syncs   *lru.Cache // types.UID → *lru.Cache of delivery key → time.Time seen
	now     func() time.Time
}

func newDeliveries(window time.Duration, perSync, syncs int) *deliveries {
	return &deliveries{window: window, perSync: perSync, syncs: lru.New(syncs), now: time.Now}
}

// claim reports whether none of keys was seen for uid within the window and, if so, records
// them all, at once: of two concurrent copies of a delivery, only one is handled. A delivery
// without keys cannot be recognized and is always handled.
func (d *deliveries) claim(uid types.UID, keys []string) bool {
	if len(keys) == 0 {
		return true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var seen *lru.Cache
	if v, ok := d.syncs.Get(uid); ok {
		seen = v.(*lru.Cache)
	} else {
		seen = lru.New(d.perSync)
		d.syncs.Add(uid, seen)
	}
	now := d.now()
	for _, k := range keys {
		if at, ok := seen.Get(k); ok && now.Sub(at.(time.Time)) < d.window {
			return false
		}
	}
	for _, k := range keys {
		seen.Add(k, now)
	}
	return true
}

// release forgets keys claimed by a delivery that could not be handled, so that its
// redelivery is.
func (d *deliveries) release(uid types.UID, keys []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if v, ok := d.syncs.Get(uid); ok {
		for _, k := range keys {
			v.(*lru.Cache).Remove(k)
		}
	}
}
