package git

import (
	"bytes"
	"crypto/sha1"
	"errors"
	"fmt"
	"hash"
	"io"
	"math"
	"os"
	"path/filepath"
	"sync"

	"github.com/go-git/go-billy/v5/osfs"
	gogit "github.com/go-git/go-git/v5"
	gitcache "github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// A pack is tenant input, and its objects' sizes are declared in it: a pack of a few
// hundred KiB can hold a blob of gigabytes of zeros. go-git's pack indexer reads every
// object of a received pack whole into memory to resolve deltas, before any limit of this
// package sees a file. So a received pack is first written aside and its object headers
// read as it streams in (inflated to nowhere, a chunk at a time): an object whose size, or
// a delta whose result, is over the per-object limit fails the fetch before go-git indexes
// the pack. Only then is the pack handed to go-git. Objects of the cache are read lazily
// above largeObjectThreshold, so an export streams a file rather than holding it.

// largeObjectThreshold is the object size above which the cache's storage streams an
// object from its pack instead of reading it into memory.
const largeObjectThreshold = 1 << 20

// packGuard is the per-object limit of one fetch and the first refusal it made.
type packGuard struct {
	maxObject int64 // 0: no limit
	// claim counts bytes about to be written against the cache quota (nil: no quota).
	claim func(n int64) error
	// slot, when set, is held while the pack is handed to go-git (FetchOptions.IndexSlot).
	slot func() (func(), error)
	mu   sync.Mutex
	err  error
}

// take claims n bytes of the cache quota, remembering a refusal as the fetch's error.
func (g *packGuard) take(n int64) error {
	if g.claim == nil {
		return nil
	}
	if err := g.claim(n); err != nil {
		g.refuse(err)
		return err
	}
	return nil
}

// indexEstimate bounds the bytes of the index go-git writes beside a pack of count objects
// (a name, a CRC and an offset per object, 64-bit offsets past 2 GiB, and a fan-out table).
func indexEstimate(count uint32) int64 { return int64(count)*36 + 2048 }

func (g *packGuard) refused() error {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

func (g *packGuard) refuse(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err == nil {
		g.err = err
	}
}

// guardedStorage is a cache repository's storage whose received packs pass the guard.
type guardedStorage struct {
	*filesystem.Storage
	dir   string
	guard *packGuard
}

// openRepository opens the bare repository at path through a guarded storage. It
// returns gogit.ErrRepositoryNotExists when there is none.
func openRepository(path string, guard *packGuard) (*gogit.Repository, error) {
	return gogit.Open(newStorage(path, guard), nil)
}

// initRepository creates a bare repository at path.
func initRepository(path string, guard *packGuard) (*gogit.Repository, error) {
	return gogit.Init(newStorage(path, guard), nil)
}

// objectCacheSize bounds go-git's cache of decoded objects per open repository: its default,
// 96 MiB, would be held by every fetch and export in flight.
const objectCacheSize = 16 * gitcache.MiByte

func newStorage(path string, guard *packGuard) *guardedStorage {
	st := filesystem.NewStorageWithOptions(osfs.New(path), gitcache.NewObjectLRU(objectCacheSize),
		filesystem.Options{LargeObjectThreshold: largeObjectThreshold})
	return &guardedStorage{Storage: st, dir: path, guard: guard}
}

// PackfileWriter returns a writer that checks the pack's objects as they arrive, keeps the
// pack aside, and gives it to the storage on Close only when every object passed.
func (s *guardedStorage) PackfileWriter() (io.WriteCloser, error) {
	if s.guard == nil || (s.guard.maxObject <= 0 && s.guard.claim == nil && s.guard.slot == nil) {
		return s.Storage.PackfileWriter()
	}
	dir := filepath.Join(s.dir, "objects", "pack")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// tmp_*: removePartialPacks removes it if the fetch is interrupted.
	f, err := os.CreateTemp(dir, "tmp_guard_")
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	w := &guardedPackWriter{s: s, file: f, pipe: pw, checked: make(chan error, 1)}
	go func() {
		var err error
		w.objects, err = checkPack(pr, s.guard.maxObject)
		if errors.Is(err, ErrTooLarge) {
			// Only a refusal: a stream cut short (a deadline, the download budget) is
			// named by what cut it.
			s.guard.refuse(err)
		}
		_ = pr.CloseWithError(err) // unblocks a writer still sending
		w.checked <- err
	}()
	return w, nil
}

// guardedPackWriter writes a received pack to a file and to checkPack.
type guardedPackWriter struct {
	s       *guardedStorage
	file    *os.File
	pipe    *io.PipeWriter
	checked chan error
	written int64  // bytes of the pack aside, claimed from the cache quota
	objects uint32 // objects the check counted
	sum     packSum
}

// packSum checks a pack's trailer: the SHA-1 of everything before its last 20 bytes. A
// stream cut short (a budget, a deadline) ends without it, and is not handed to go-git.
type packSum struct {
	h    hash.Hash
	tail []byte // the last bytes seen, not hashed yet (at most 20)
}

func (s *packSum) write(p []byte) {
	if s.h == nil {
		s.h = sha1.New()
	}
	if len(p) >= sha1.Size {
		s.h.Write(s.tail)
		s.h.Write(p[:len(p)-sha1.Size])
		s.tail = append(s.tail[:0], p[len(p)-sha1.Size:]...)
		return
	}
	s.tail = append(s.tail, p...)
	if extra := len(s.tail) - sha1.Size; extra > 0 {
		s.h.Write(s.tail[:extra])
		s.tail = append(s.tail[:0], s.tail[extra:]...)
	}
}

// complete reports whether the bytes seen end with the SHA-1 of those before.
func (s *packSum) complete() bool {
	return s.h != nil && len(s.tail) == sha1.Size && bytes.Equal(s.h.Sum(nil), s.tail)
}

func (w *guardedPackWriter) Write(p []byte) (int, error) {
	if err := w.s.guard.take(onDisk(w.written+int64(len(p))) - onDisk(w.written)); err != nil {
		_ = w.pipe.CloseWithError(err)
		return 0, err
	}
	w.written += int64(len(p))
	w.sum.write(p)
	if _, err := w.pipe.Write(p); err != nil {
		if errors.Is(err, io.ErrClosedPipe) {
			err = io.ErrUnexpectedEOF
		}
		return 0, err
	}
	return w.file.Write(p)
}

// Close waits for the check and, when it passed, hands the pack to the storage.
func (w *guardedPackWriter) Close() (err error) {
	_ = w.pipe.Close()
	checkErr := <-w.checked
	defer func() {
		_ = w.file.Close()
		if os.Remove(w.file.Name()) == nil {
			_ = w.s.guard.take(-onDisk(w.written))
		}
	}()
	if checkErr != nil {
		return checkErr
	}
	if w.objects > 0 && !w.sum.complete() {
		return fmt.Errorf("the received pack ends before its checksum: %w", io.ErrUnexpectedEOF)
	}
	if _, err := w.file.Seek(0, io.SeekStart); err != nil {
		return err
	}
	// The slot first: a fetch waiting for one holds no more of the quota than its pack.
	if w.s.guard.slot != nil {
		release, err := w.s.guard.slot()
		if err != nil {
			return fmt.Errorf("index the received pack: %w", err)
		}
		defer release()
	}
	// The pack's copy in the repository and its index, claimed before they are written.
	if err := w.s.guard.take(onDisk(w.written) + onDisk(indexEstimate(w.objects))); err != nil {
		return err
	}
	pw, err := w.s.Storage.PackfileWriter()
	if err != nil {
		return err
	}
	if _, err := io.Copy(pw, w.file); err != nil {
		_ = pw.Close()
		return err
	}
	return pw.Close()
}

// checkPack reads a pack's object headers, inflating each object to nowhere, and refuses
// an object, or a delta's result, over maxObject bytes. An empty stream passes.
func checkPack(r io.Reader, maxObject int64) (uint32, error) {
	s := packfile.NewScanner(r)
	_, count, err := s.Header()
	if errors.Is(err, io.EOF) || errors.Is(err, packfile.ErrEmptyPackfile) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read pack header: %w", err)
	}
	for i := uint32(0); i < count; i++ {
		oh, err := s.NextObjectHeader()
		if err != nil {
			return 0, fmt.Errorf("read pack object %d: %w", i, err)
		}
		if maxObject > 0 && oh.Length > maxObject {
			return 0, objectTooLarge(oh.Type.String(), oh.Length, maxObject)
		}
		if maxObject <= 0 || !oh.Type.IsDelta() {
			continue
		}
		var d deltaHeader
		if _, _, err := s.NextObject(&d); err != nil {
			return 0, fmt.Errorf("read pack object %d: %w", i, err)
		}
		if d.target > maxObject {
			return 0, objectTooLarge("delta result", d.target, maxObject)
		}
	}
	_, err = io.Copy(io.Discard, r) // the checksum
	return count, err
}

func objectTooLarge(what string, size, limit int64) error {
	return fmt.Errorf("%w: the pack holds a %s of %d bytes, over the limit of %d per file (refused before it was inflated)", ErrTooLarge, what, size, limit)
}

// deltaHeader reads the result size of a delta from its inflated data (two varints: the
// base's size, then the result's) and discards the rest.
type deltaHeader struct {
	varints int
	shift   uint
	cur     uint64
	target  int64
}

func (d *deltaHeader) Write(p []byte) (int, error) {
	for _, b := range p {
		if d.varints == 2 {
			break
		}
		if d.shift < 63 {
			d.cur |= uint64(b&0x7f) << d.shift
		}
		d.shift += 7
		if b&0x80 == 0 {
			d.varints++
			if d.varints == 2 {
				d.target = int64(min(d.cur, math.MaxInt64))
			}
			d.cur, d.shift = 0, 0
		}
	}
	return len(p), nil
}
