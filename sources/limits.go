package sources

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
)

// Limits bound what one render may read and produce, so that a repository cannot exhaust
// the daemon's memory or time with its size. A zero field means its default.
type Limits struct {
	// MaxFiles bounds the files one kustomize build reaches (its kustomizations and the
	// files they reference, see reach.go), and the manifest files of a plain folder.
	MaxFiles int
	// MaxFileSize bounds one file, in bytes. A larger file is refused before it is read.
	MaxFileSize int64
	// MaxObjects bounds the objects of one render. They are counted while decoding, so a
	// render stops as soon as it passes the limit.
	MaxObjects int
	// MaxTotalSize bounds the bytes one render reads: every file decoded (a symlink counts
	// at its target's size, each time it is read), the files each kustomize build reaches
	// (once per build), and the answers of render children. Files no build reaches are not
	// counted.
	MaxTotalSize int64
	// MaxRenderMemory bounds the memory of one render child (an isolated kustomize build),
	// in bytes: the kernel refuses the child more address space than it held at start plus
	// this much, so a build that would take more dies alone and the render fails naming
	// the limit. The child's Go runtime collects hard before it (GOMEMLIMIT).
	MaxRenderMemory int64
	// MaxRenderOutput bounds the bytes of manifests one render decodes into this process's
	// heap (render children's answers, plain YAML and JSON files), counted as each resource
	// or document is decoded: the objects of a render live in the daemon (up to
	// decodeFactor heap bytes per byte), so --concurrent renders at once hold at most about
	// --concurrent × MaxRenderOutput × decodeFactor.
	MaxRenderOutput int64
	// RenderSlots bounds the render children running at once in this process, across all
	// renders made with the same RenderSlots (0: DefaultRenderSlots): the memory of render
	// children is at most RenderSlots × MaxRenderMemory, whatever the number of cores.
	RenderSlots int
}

// Default limits: far above the examples and `make bench` (10,000 objects in 10,000
// files of about 1 KiB), far below what would exhaust a daemon. DefaultMaxTotalSize is
// the git export's total limit (sources/git): a render reads at most what its checkout
// holds, once per kustomize build that reaches it all.
const (
	DefaultMaxFiles     = 20000
	DefaultMaxFileSize  = 8 << 20
	DefaultMaxObjects   = 50000
	DefaultMaxTotalSize = 256 << 20
	// DefaultMaxRenderMemory is a render child's memory budget: a whole kustomize build of
	// 3,000 objects fits (1,000 fit in 32 MiB); two children at once (render slots) take a
	// quarter of the shipped Deployment's 512 MiB.
	DefaultMaxRenderMemory = 64 << 20
	// DefaultMaxRenderOutput is the answer bytes one render may decode into the daemon:
	// a kustomize build of about 6,500 Deployments of 650 bytes, 4,000 ConfigMaps of 1 KiB,
	// or a large CRD bundle. Four renders at once at the measured decode factor
	// (decodeFactor) hold at most 224 MiB of the shipped 512 MiB.
	DefaultMaxRenderOutput = 4 << 20
)

// decodeFactor bounds the heap bytes a decoded render object takes per byte of its JSON
// answer, as measured by TestAnswerDecodeFactor: ConfigMap-heavy answers (long string
// values) about 2.2, Deployment-heavy ones (many short fields, each a map entry) about
// 12 (12.8 under the race detector).
const decodeFactor = 14

// DefaultLimits returns DefaultMaxFiles, DefaultMaxFileSize, DefaultMaxObjects and
// DefaultMaxTotalSize.
func DefaultLimits() Limits {
	return Limits{MaxFiles: DefaultMaxFiles, MaxFileSize: DefaultMaxFileSize, MaxObjects: DefaultMaxObjects,
		MaxTotalSize: DefaultMaxTotalSize, MaxRenderMemory: DefaultMaxRenderMemory, MaxRenderOutput: DefaultMaxRenderOutput}
}

// withDefaults fills zero fields with their defaults.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxFiles <= 0 {
		l.MaxFiles = d.MaxFiles
	}
	if l.MaxFileSize <= 0 {
		l.MaxFileSize = d.MaxFileSize
	}
	if l.MaxObjects <= 0 {
		l.MaxObjects = d.MaxObjects
	}
	if l.MaxTotalSize <= 0 {
		l.MaxTotalSize = d.MaxTotalSize
	}
	if l.MaxRenderMemory <= 0 {
		l.MaxRenderMemory = d.MaxRenderMemory
	}
	if l.MaxRenderOutput <= 0 {
		l.MaxRenderOutput = d.MaxRenderOutput
	}
	return l
}

var (
	// ErrTooManyFiles reports a source with more files than Limits.MaxFiles.
	ErrTooManyFiles = errors.New("too many files")
	// ErrFileTooLarge reports a file larger than Limits.MaxFileSize.
	ErrFileTooLarge = errors.New("file too large")
	// ErrTooManyObjects reports a render with more objects than Limits.MaxObjects.
	ErrTooManyObjects = errors.New("too many objects")
	// ErrSourceTooLarge reports a render that read more than Limits.MaxTotalSize bytes.
	ErrSourceTooLarge = errors.New("source too large")
	// ErrRenderMemory reports a render child that needed more than Limits.MaxRenderMemory.
	ErrRenderMemory = errors.New("render exceeded the memory limit")
	// ErrRenderOutput reports a render whose children answered more than
	// Limits.MaxRenderOutput bytes.
	ErrRenderOutput = errors.New("render output too large")
)

func tooManyFiles(file string, max int) error {
	return &InputError{File: file, Err: fmt.Errorf("%w: more than %d files (raise the limit with --max-files)", ErrTooManyFiles, max)}
}

func tooManyObjects(file string, n, max int) error {
	return &InputError{File: file, Err: fmt.Errorf("%w: %d objects, more than %d (raise the limit with --max-objects)", ErrTooManyObjects, n, max)}
}

// readFile reads the slash path rel under root through os.Root, so that no symlink (not
// even one swapped in while we read) leads outside the root, and refuses a file larger than
// b's MaxFileSize, or one that would take b past its MaxTotalSize, without reading it whole.
func readFile(root *os.Root, rel string, b *budget) ([]byte, error) {
	f, err := root.Open(filepath.FromSlash(rel))
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", rel)
	}
	max := b.limits.MaxFileSize
	if info.Size() > max {
		return nil, fileTooLarge(rel, info.Size(), max)
	}
	if err := b.read(info.Size()); err != nil {
		return nil, err
	}
	// The size can grow after Stat: read one byte more than allowed to notice.
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fileTooLarge(rel, int64(len(data)), max)
	}
	if grown := int64(len(data)) - info.Size(); grown > 0 {
		if err := b.read(grown); err != nil {
			return nil, err
		}
	}
	return data, nil
}

func fileTooLarge(rel string, size, max int64) error {
	return &InputError{File: rel, Err: fmt.Errorf("%w: %d bytes, more than %d (raise the limit with --max-file-size)", ErrFileTooLarge, size, max)}
}

// budget counts what one render has read and decoded against its limits; the render's
// workers share it. Once over a limit it stays failed, so the other workers stop reading
// and the render reports that one error instead of one per file.
type budget struct {
	limits  Limits
	rel     string // the rendered path, for messages
	bytes   atomic.Int64
	objects atomic.Int64
	output  atomic.Int64
	mu      sync.Mutex
	err     error
}

func newBudget(rel string, limits Limits) *budget {
	return &budget{limits: limits.withDefaults(), rel: rel}
}

// read counts n bytes read, failing when the total passes MaxTotalSize.
func (b *budget) read(n int64) error {
	if err := b.failed(); err != nil {
		return err
	}
	if b.bytes.Add(n) > b.limits.MaxTotalSize {
		return b.fail(&InputError{File: b.rel, Err: fmt.Errorf("%w: more than %d bytes read (raise the limit with --max-total-size)", ErrSourceTooLarge, b.limits.MaxTotalSize)})
	}
	return nil
}

// decoded counts n objects decoded, failing when the total passes MaxObjects.
func (b *budget) decoded(n int) error {
	if err := b.failed(); err != nil {
		return err
	}
	if total := b.objects.Add(int64(n)); total > int64(b.limits.MaxObjects) {
		return b.fail(tooManyObjects(b.rel, int(total), b.limits.MaxObjects))
	}
	return nil
}

// answered counts n bytes of a render child's answer decoded into this process, failing
// when the render's total passes MaxRenderOutput. The bytes are also counted in the
// process's answerBytesHeld until release (the render's end).
func (b *budget) answered(n int64) error {
	if err := b.failed(); err != nil {
		return err
	}
	answerBytesHeld.add(n)
	if b.output.Add(n) > b.limits.MaxRenderOutput {
		return b.fail(&InputError{File: b.rel, Err: fmt.Errorf("%w: render children answered more than %d bytes (raise the limit with --max-render-output)",
			ErrRenderOutput, b.limits.MaxRenderOutput)})
	}
	return nil
}

// decodedBytes counts n bytes of manifests decoded in this process from the source's file
// (plain YAML or JSON) against MaxRenderOutput, as answered does for a child's answer.
func (b *budget) decodedBytes(file string, n int64) error {
	if n <= 0 {
		return nil
	}
	if err := b.failed(); err != nil {
		return err
	}
	answerBytesHeld.add(n)
	if b.output.Add(n) > b.limits.MaxRenderOutput {
		return b.fail(&InputError{File: file, Err: fmt.Errorf("%w: the render decoded more than %d bytes of manifests (raise the limit with --max-render-output)",
			ErrRenderOutput, b.limits.MaxRenderOutput)})
	}
	return nil
}

// release takes the render's answer bytes off answerBytesHeld: its objects are now the
// caller's (the render cache keeps them as JSON, counted there).
func (b *budget) release() {
	answerBytesHeld.add(-b.output.Swap(0))
}

// heldGauge counts bytes held process-wide and remembers the most held at once.
type heldGauge struct {
	mu   sync.Mutex
	n    int64
	high int64
}

func (g *heldGauge) add(n int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n += n
	g.high = max(g.high, g.n)
}

// answerBytesHeld is the answer bytes of the renders in progress, decoded in this process.
var answerBytesHeld heldGauge

// remaining returns the bytes still allowed, at least 1 so that a cap made of it is
// never read as "no cap".
func (b *budget) remaining() int64 {
	return max(1, b.limits.MaxTotalSize-b.bytes.Load())
}

func (b *budget) fail(err error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil {
		b.err = err
	}
	return b.err
}

// failed returns the first error of read or decoded, if any.
func (b *budget) failed() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}
