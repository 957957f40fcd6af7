package engine

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/object"
)

// memo remembers, per object, the hash of the desired object last applied (or verified
// unchanged) and the resourceVersion the live object had right after. When both still match —
// the same desired object, and the watch cache shows the live object at that very version —
// applying would change nothing, so the engine sends nothing (a no-op reconcile costs no request per object). Any
// change on either side (a new commit, an out-of-band edit, a controller's status update)
// takes the full path: read, judge (appliedAsDesired, else dry-run and compare), apply. The
// memo lives in the process; what survives a restart is the API server's own record of our
// applies, managedFields, which appliedAsDesired reads.
type memo struct {
	mu sync.Mutex
	m  map[object.ObjMetadata]memoEntry
}

type memoEntry struct {
	hash            [sha256.Size]byte
	resourceVersion string
}

func newMemo() *memo { return &memo{m: map[object.ObjMetadata]memoEntry{}} }

// get returns what the memo recorded of id.
func (m *memo) get(id object.ObjMetadata) (memoEntry, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.m[id]
	return e, ok
}

// hit reports whether e recorded this desired hash and live resourceVersion.
func (e memoEntry) hit(hash [sha256.Size]byte, resourceVersion string) bool {
	return e.hash == hash && e.resourceVersion == resourceVersion && resourceVersion != ""
}

// has reports whether the memo knows anything of id.
func (m *memo) has(id object.ObjMetadata) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.m[id]
	return ok
}

// at reports whether the last write or verification of id left it at resourceVersion.
func (m *memo) at(id object.ObjMetadata, resourceVersion string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.m[id]
	return ok && e.resourceVersion == resourceVersion
}

// remember records that the live object was at resourceVersion right after desired (hash)
// was applied or verified.
func (m *memo) remember(id object.ObjMetadata, hash [sha256.Size]byte, resourceVersion string) {
	if resourceVersion == "" {
		m.forget(id)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.m[id] = memoEntry{hash: hash, resourceVersion: resourceVersion}
}

func (m *memo) forget(id object.ObjMetadata) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.m, id)
}

// hashObject hashes the desired object as manager would send it (owner annotation
// included). It encodes the object's JSON-shaped values canonically (map keys sorted, every
// value tagged with its type and length), so equal objects hash equally, at a fraction of the
// cost of JSON encoding. Every reconcile hashes its whole set, so the encoder and its buffers
// are reused (canonicalPool): at 50,000 objects a fresh buffer per object was a fifth of a
// no-op reconcile's garbage.
func hashObject(manager string, u *unstructured.Unstructured) [sha256.Size]byte {
	e := canonicalPool.Get().(*canonical)
	e.b = e.b[:0]
	e.str(manager)
	e.value(u.Object)
	sum := sha256.Sum256(e.b)
	clear(e.fields[:cap(e.fields)]) // keep no object's values alive from the pool
	e.fields = e.fields[:0]
	if cap(e.b) <= maxPooledBuffer {
		canonicalPool.Put(e)
	}
	return sum
}

// maxPooledBuffer bounds the encoding buffer kept for reuse: a rare huge object does not pin
// its size in memory.
const maxPooledBuffer = 1 << 20

var canonicalPool = sync.Pool{New: func() any { return &canonical{b: make([]byte, 0, 4096)} }}

// canonical is an unambiguous binary encoding of JSON-shaped values: a type tag, then
// length-prefixed content. fields is a stack of the map entries being encoded, shared by
// the nested maps of one value (each sorts and encodes its own top of the stack).
type canonical struct {
	b      []byte
	fields []mapEntry
}

// mapEntry is one entry of a map being encoded.
type mapEntry struct {
	key string
	val any
}

func (e *canonical) tag(t byte, n uint64) {
	e.b = binary.LittleEndian.AppendUint64(append(e.b, t), n)
}

func (e *canonical) str(s string) {
	e.tag('s', uint64(len(s)))
	e.b = append(e.b, s...)
}

func (e *canonical) value(v any) {
	switch v := v.(type) {
	case nil:
		e.tag('n', 0)
	case bool:
		n := uint64(0)
		if v {
			n = 1
		}
		e.tag('b', n)
	case string:
		e.str(v)
	case int64:
		e.tag('i', uint64(v))
	case int:
		e.tag('i', uint64(v))
	case int32:
		e.tag('i', uint64(v))
	case float64:
		e.tag('f', math.Float64bits(v))
	case []any:
		e.tag('l', uint64(len(v)))
		for _, x := range v {
			e.value(x)
		}
	case map[string]any:
		e.tag('m', uint64(len(v)))
		start := len(e.fields)
		for k, x := range v {
			e.fields = append(e.fields, mapEntry{k, x})
		}
		// Nested maps push above this map's entries; should that grow the stack into a new
		// array, fs still holds this map's entries in the old one.
		fs := e.fields[start:]
		slices.SortFunc(fs, func(a, b mapEntry) int { return strings.Compare(a.key, b.key) })
		for _, f := range fs {
			e.str(f.key)
			e.value(f.val)
		}
		e.fields = e.fields[:start]
	default: // not produced by decoding JSON or YAML; fall back to its JSON form
		j, err := json.Marshal(v)
		if err != nil {
			j = fmt.Appendf(nil, "%T %v", v, v)
		}
		e.tag('j', uint64(len(j)))
		e.b = append(e.b, j...)
	}
}
