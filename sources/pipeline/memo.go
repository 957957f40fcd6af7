package pipeline

import (
	"crypto/sha256"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/converge-dev/converge/sources"
)

// Memo keeps the last substitution (or, as Decryption.Memo, the last decryption) of one
// caller (a Sync): a Bundle of the same rendered objects with the same variables (or keys)
// (every interval and drift reconcile between commits) reuses the result instead of serializing and decoding every object with a reference
// again (BenchmarkExpand: about 2 s of CPU at 10,000 such objects). The result shares every
// part no variable changed with the rendered objects (varsubst.Expand), so keeping it costs
// the substituted paths, not a second copy of the render. The zero value is ready to use;
// a nil Memo keeps nothing.
type Memo struct {
	mu sync.Mutex
	// key is the render the last Expand was given (Bundle.Key), or, for a Bundle without a
	// key, in are its objects; fp the fingerprint of its variables and options, out its result.
	key string
	in  []*unstructured.Unstructured
	fp  [sha256.Size]byte
	out *sources.Bundle
}

// lookup returns the kept result when it was computed from the same render (the same
// Bundle.Key; without one, the same objects) with the same fingerprint, as a Bundle of b's
// revision; nil otherwise. A result that does not
// match is dropped at once: it is of no further use, it may hold values of a Secret that
// has changed since, and kept during the new Expand it would be a second result in memory
// at the peak.
func (m *Memo) lookup(b *sources.Bundle, fp [sha256.Size]byte) *sources.Bundle {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.out == nil {
		return nil
	}
	if m.fp != fp || m.key != b.Key || b.Key == "" && !slices.Equal(m.in, b.Objects) {
		m.key, m.in, m.out = "", nil, nil
		return nil
	}
	out := *b
	out.Objects = m.out.Objects
	return &out
}

// drop forgets the kept result: a substitution failed, and whatever it would reuse may be
// out of date.
func (m *Memo) drop() {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.key, m.in, m.out = "", nil, nil
}

func (m *Memo) keep(b *sources.Bundle, fp [sha256.Size]byte, out *sources.Bundle) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.key, m.in, m.fp, m.out = b.Key, nil, fp, out
	if b.Key == "" {
		m.in = b.Objects
	}
}
