package sources

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Limits bound what one render may read and produce, so that a repository cannot exhaust
// the daemon's memory or time with its size. A zero field means its default.
type Limits struct {
	// MaxFiles bounds the files of the source root copied for a kustomize build, and the
	// manifest files of a plain folder.
	MaxFiles int
	// MaxFileSize bounds one file, in bytes. A larger file is refused before it is read.
	MaxFileSize int64
	// MaxObjects bounds the objects of one render.
	MaxObjects int
}

// Default limits: far above the examples and `make bench` (10,000 objects in 10,000
// files of about 1 KiB), far below what would exhaust a daemon.
const (
	DefaultMaxFiles    = 20000
	DefaultMaxFileSize = 8 << 20
	DefaultMaxObjects  = 50000
)

// DefaultLimits returns DefaultMaxFiles, DefaultMaxFileSize and DefaultMaxObjects.
func DefaultLimits() Limits {
	return Limits{MaxFiles: DefaultMaxFiles, MaxFileSize: DefaultMaxFileSize, MaxObjects: DefaultMaxObjects}
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
	return l
}

var (
	// ErrTooManyFiles reports a source with more files than Limits.MaxFiles.
	ErrTooManyFiles = errors.New("too many files")
	// ErrFileTooLarge reports a file larger than Limits.MaxFileSize.
	ErrFileTooLarge = errors.New("file too large")
	// ErrTooManyObjects reports a render with more objects than Limits.MaxObjects.
	ErrTooManyObjects = errors.New("too many objects")
)

func tooManyFiles(file string, max int) error {
	return &InputError{File: file, Err: fmt.Errorf("%w: more than %d files (raise the limit with --max-files)", ErrTooManyFiles, max)}
}

func tooManyObjects(file string, n, max int) error {
	return &InputError{File: file, Err: fmt.Errorf("%w: %d objects, more than %d (raise the limit with --max-objects)", ErrTooManyObjects, n, max)}
}

// readFile reads the slash path rel under root through os.Root, so that no symlink (not
// even one swapped in while we read) leads outside the root, and refuses a file larger than
// max without reading it whole.
func readFile(root *os.Root, rel string, max int64) ([]byte, error) {
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
	if info.Size() > max {
		return nil, fileTooLarge(rel, info.Size(), max)
	}
	// The size can grow after Stat: read one byte more than allowed to notice.
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fileTooLarge(rel, int64(len(data)), max)
	}
	return data, nil
}

func fileTooLarge(rel string, size, max int64) error {
	return &InputError{File: rel, Err: fmt.Errorf("%w: %d bytes, more than %d (raise the limit with --max-file-size)", ErrFileTooLarge, size, max)}
}
