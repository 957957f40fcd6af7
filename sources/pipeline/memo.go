package pipeline

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/converge-dev/converge/sources"
)

// Memo keeps the last substitution (or, as Decryption.Memo, the last decryption) of one
// caller (a Sync): a Bundle of the same render with the same variables (or keys) (every
// interval and drift reconcile between commits) reuses the result instead of serializing and
// decoding every object with a reference again (BenchmarkExpand: about 2 s of CPU at 10,000
// such objects). It keeps only the objects the step changed, by their index: the result of a
// later run is that run's own objects with these in their places, so keeping it costs the
// changed objects, not a copy of the render (each load decodes its own render, and the
// unchanged objects are the new load's). The zero value is ready to use; a nil Memo keeps
// nothing.
type Memo struct {
	mu sync.Mutex
	// key is the render the kept run was given (Bundle.Key); for a Bundle without a key, in
	// are its objects. fp is the fingerprint of its variables (or keys) and options, n the
	// number of its objects, changed the objects of its result that are not the input's,
	// each with the identity of the input object it replaced.
	key     string
	in      []*unstructured.Unstructured
	fp      [sha256.Size]byte
	n       int
	changed map[int]changedObject
	kept    bool
}

// changedObject is an object a step changed: what it became, and who it was.
type changedObject struct {
	out *unstructured.Unstructured
	was string
}

// lookup returns the kept result when it was computed from the same render (the same
// Bundle.Key; without one, the same objects) with the same fingerprint: b with the kept
// objects in their places (b itself when the step changed nothing); nil otherwise, and nil
// when an object of b in such a place is not the one the kept object replaced (a render
// that is not the same for one key must not get objects twice, or lose one). A
// result that does not match is dropped at once: it is of no further use, it may hold
// values of a Secret that has changed since, and kept during the new run it would be a
// second result in memory at the peak.
func (m *Memo) lookup(b *sources.Bundle, fp [sha256.Size]byte) *sources.Bundle {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.kept {
		return nil
	}
	if m.fp != fp || m.key != b.Key || m.n != len(b.Objects) || b.Key == "" && !slices.Equal(m.in, b.Objects) {
		m.forget()
		return nil
	}
	for i, c := range m.changed {
		if sources.ObjectID(b.Objects[i]) != c.was {
			m.forget()
			return nil
		}
	}
	if len(m.changed) == 0 {
		return b
	}
	out := *b
	out.Objects = slices.Clone(b.Objects)
	for i, c := range m.changed {
		out.Objects[i] = c.out
	}
	return &out
}

// drop forgets the kept result: a run failed, and whatever it would reuse may be out of date.
func (m *Memo) drop() {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.forget()
}

// forget clears m; m.mu is held.
func (m *Memo) forget() {
	m.key, m.in, m.n, m.changed, m.kept = "", nil, 0, nil, false
}

// keep records out, the result of a run on b with fingerprint fp: the objects it changed.
// A result of another length than b (no step makes one) is not kept.
func (m *Memo) keep(b *sources.Bundle, fp [sha256.Size]byte, out *sources.Bundle) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.forget()
	if len(out.Objects) != len(b.Objects) {
		return
	}
	for i, o := range out.Objects {
		if o != b.Objects[i] {
			if m.changed == nil {
				m.changed = map[int]changedObject{}
			}
			m.changed[i] = changedObject{out: o, was: sources.ObjectID(b.Objects[i])}
		}
	}
	m.key, m.fp, m.n, m.kept = b.Key, fp, len(b.Objects), true
	if b.Key == "" {
		m.in = b.Objects
	}
}

// derive gives out, which a step with fingerprint fp made of b, a Key of its own when it
// is not b: a hash of b's Key and fp. Two results of one render with other keys or
// variables (decrypted and not, substituted otherwise) never share a Key, so a later
// step's Memo never takes one for the other. A Bundle without a Key gives one without.
func derive(b, out *sources.Bundle, fp [sha256.Size]byte) *sources.Bundle {
	if out == b || b.Key == "" {
		return out
	}
	h := sha256.New()
	h.Write([]byte(b.Key))
	h.Write(fp[:])
	out.Key = hex.EncodeToString(h.Sum(nil))
	return out
}
