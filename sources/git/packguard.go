package git

import (
	"errors"
	"fmt"
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
	mu        sync.Mutex
	err       error
}

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
	if s.guard == nil || s.guard.maxObject <= 0 {
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
		err := checkPack(pr, s.guard.maxObject)
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
}

func (w *guardedPackWriter) Write(p []byte) (int, error) {
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
		_ = os.Remove(w.file.Name())
	}()
	if checkErr != nil {
		return checkErr
	}
	if _, err := w.file.Seek(0, io.SeekStart); err != nil {
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
func checkPack(r io.Reader, maxObject int64) error {
	s := packfile.NewScanner(r)
	_, count, err := s.Header()
	if errors.Is(err, io.EOF) || errors.Is(err, packfile.ErrEmptyPackfile) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read pack header: %w", err)
	}
	for i := uint32(0); i < count; i++ {
		oh, err := s.NextObjectHeader()
		if err != nil {
			return fmt.Errorf("read pack object %d: %w", i, err)
		}
		if oh.Length > maxObject {
			return objectTooLarge(oh.Type.String(), oh.Length, maxObject)
		}
		if !oh.Type.IsDelta() {
			continue
		}
		var d deltaHeader
		if _, _, err := s.NextObject(&d); err != nil {
			return fmt.Errorf("read pack object %d: %w", i, err)
		}
		if d.target > maxObject {
			return objectTooLarge("delta result", d.target, maxObject)
		}
	}
	_, err = io.Copy(io.Discard, r) // the checksum
	return err
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
