package engine

import (
	"crypto/sha256"
	"encoding/json"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/object"
)

// memo remembers, per object, the hash of the desired object last applied (or verified
// unchanged) and the resourceVersion the live object had right after. When both still match —
// the same desired object, and the watch cache shows the live object at that very version —
// applying would change nothing, so the engine sends nothing (PERFORMANCE.md lever 2). Any
// change on either side (a new commit, an out-of-band edit, a controller's status update)
// takes the full path: dry-run, compare, apply.
type memo struct {
	mu sync.Mutex
	m  map[object.ObjMetadata]memoEntry
}

type memoEntry struct {
	hash            [sha256.Size]byte
	resourceVersion string
}

func newMemo() *memo { return &memo{m: map[object.ObjMetadata]memoEntry{}} }

// hit reports whether id was last seen with this desired hash and live resourceVersion.
func (m *memo) hit(id object.ObjMetadata, hash [sha256.Size]byte, resourceVersion string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.m[id]
	return ok && e.hash == hash && e.resourceVersion == resourceVersion && resourceVersion != ""
}

// at reports whether the last write or verification of id left it at resourceVersion.
func (m *memo) at(id object.ObjMetadata, resourceVersion string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.m[id]
	return ok && e.resourceVersion == resourceVersion
}

// changed reports whether id was last applied from a different desired hash.
func (m *memo) changed(id object.ObjMetadata, hash [sha256.Size]byte) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.m[id]
	return ok && e.hash != hash
}

// remember records that live is what desired (hash) yields on the server.
func (m *memo) remember(id object.ObjMetadata, hash [sha256.Size]byte, live *unstructured.Unstructured) {
	if live == nil || live.GetResourceVersion() == "" {
		m.forget(id)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.m[id] = memoEntry{hash: hash, resourceVersion: live.GetResourceVersion()}
}

func (m *memo) forget(id object.ObjMetadata) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.m, id)
}

// hashObject hashes the desired object as manager would send it (owner annotation
// included). encoding/json sorts map keys, so equal objects hash equally.
func hashObject(manager string, u *unstructured.Unstructured) [sha256.Size]byte {
	b, err := json.Marshal(u.Object)
	if err != nil {
		return [sha256.Size]byte{} // never matches a remembered hash of a real object
	}
	h := sha256.New()
	h.Write([]byte(manager))
	h.Write([]byte{0})
	h.Write(b)
	return [sha256.Size]byte(h.Sum(nil))
}
