package oci

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

// limits bound one extraction; a zero field means no limit.
type limits struct {
	files     int
	fileSize  int64
	totalSize int64
}

// tarOverhead is what the tar stream may hold beyond its files' bytes, per entry: a header
// block, a PAX header and padding. The inflated stream is bounded by the total size plus
// this per allowed file, so a gzip bomb of headers or padding stops too.
const tarOverhead = 3 << 10

// extractor writes one layer's entries under root.
type extractor struct {
	what  string // the artifact, for messages
	root  *os.Root
	lim   limits
	files int
	total int64
	seen  map[string]bool
	// links holds the symlinks written so far: no later entry is written under one, and
	// none is hard-linked, so a link's target is only ever judged from where it was written.
	links map[string]bool
}

// extract unpacks the tar (gzip-compressed or not) read from r into root, and returns the
// bytes written. Files and inflated bytes are counted as they are inflated.
func extract(what string, r io.Reader, root *os.Root, lim limits) (int64, error) {
	br := bufio.NewReader(r)
	var src io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return 0, fmt.Errorf("%s: layer: %w: %v", what, ErrInvalid, err)
		}
		defer zr.Close()
		src = zr
	}
	if lim.totalSize > 0 {
		bound := lim.totalSize + tarOverhead*int64(max(lim.files, 1)) + 1<<20
		src = &inflateBound{r: src, left: bound, what: what, limit: lim.totalSize}
	}
	x := &extractor{what: what, root: root, lim: lim, seen: map[string]bool{}, links: map[string]bool{}}
	tr := tar.NewReader(src)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return x.total, nil
		}
		if err != nil {
			if errors.Is(err, ErrTooLarge) {
				return x.total, err
			}
			return x.total, fmt.Errorf("%s: layer: %w: not a tar archive: %v", what, ErrInvalid, err)
		}
		if err := x.entry(h, tr); err != nil {
			return x.total, err
		}
	}
}

// inflateBound fails a read past its bytes: the inflated stream's bound.
type inflateBound struct {
	r     io.Reader
	left  int64
	what  string
	limit int64
}

func (b *inflateBound) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, fmt.Errorf("%s: layer: %w: inflates past %d bytes (--max-total-size)", b.what, ErrTooLarge, b.limit)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}

// cleanName returns the entry's name relative to the root, or an error for an absolute
// name or one with "..".
func (x *extractor) cleanName(name string) (string, error) {
	n := strings.TrimPrefix(name, "./")
	if n == "" || n == "." {
		return "", nil
	}
	if path.IsAbs(n) || strings.Contains(n, "\\") {
		return "", fmt.Errorf("%s: %q: %w: absolute name", x.what, name, ErrUnsafeEntry)
	}
	for _, part := range strings.Split(n, "/") {
		if part == ".." {
			return "", fmt.Errorf("%s: %q: %w: name climbs out with ..", x.what, name, ErrUnsafeEntry)
		}
	}
	return path.Clean(n), nil
}

// entry writes one tar entry.
func (x *extractor) entry(h *tar.Header, r io.Reader) error {
	name, err := x.cleanName(h.Name)
	if err != nil || name == "" {
		return err
	}
	if h.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	// Every entry counts, folders included: a layer of a million empty folders costs the
	// disk its inodes as a million files would.
	x.files++
	if x.lim.files > 0 && x.files > x.lim.files {
		return fmt.Errorf("%s: layer: %w: more than %d entries (--max-files)", x.what, ErrTooLarge, x.lim.files)
	}
	if h.Typeflag != tar.TypeDir {
		if x.seen[name] {
			return fmt.Errorf("%s: %q: %w: written twice", x.what, h.Name, ErrUnsafeEntry)
		}
		x.seen[name] = true
	}
	for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
		if x.links[dir] {
			return fmt.Errorf("%s: %q: %w: its folder %q is a symlink of the same layer", x.what, h.Name, ErrUnsafeEntry, dir)
		}
	}
	if dir := path.Dir(name); dir != "." {
		if err := x.root.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("%s: %q: %w: %v", x.what, h.Name, ErrUnsafeEntry, err)
		}
	}
	switch h.Typeflag {
	case tar.TypeDir:
		if err := x.root.MkdirAll(name, 0o755); err != nil {
			return fmt.Errorf("%s: %q: %w: %v", x.what, h.Name, ErrUnsafeEntry, err)
		}
		return nil
	case tar.TypeReg, tar.TypeRegA:
		return x.file(name, h, r)
	case tar.TypeSymlink:
		return x.symlink(name, h)
	case tar.TypeLink:
		target, err := x.cleanName(h.Linkname)
		if err != nil || target == "" || !x.seen[target] || x.links[target] {
			return fmt.Errorf("%s: %q: %w: hard link to %q, not an earlier regular file of the layer", x.what, h.Name, ErrUnsafeEntry, h.Linkname)
		}
		if err := x.root.Link(target, name); err != nil {
			return fmt.Errorf("%s: %q: %w: %v", x.what, h.Name, ErrUnsafeEntry, err)
		}
		return nil
	}
	return fmt.Errorf("%s: %q: %w: type %q (devices, FIFOs and other special files are refused)", x.what, h.Name, ErrUnsafeEntry, h.Typeflag)
}

// file writes a regular file, counting its bytes as they are inflated.
func (x *extractor) file(name string, h *tar.Header, r io.Reader) error {
	if x.lim.fileSize > 0 && h.Size > x.lim.fileSize {
		return fmt.Errorf("%s: %q: %w: %d bytes, over %d (--max-file-size)", x.what, h.Name, ErrTooLarge, h.Size, x.lim.fileSize)
	}
	if x.lim.totalSize > 0 && x.total+h.Size > x.lim.totalSize {
		return fmt.Errorf("%s: layer: %w: more than %d bytes of files (--max-total-size)", x.what, ErrTooLarge, x.lim.totalSize)
	}
	f, err := x.root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("%s: %q: %w: %v", x.what, h.Name, ErrUnsafeEntry, err)
	}
	n, err := io.Copy(f, io.LimitReader(r, h.Size))
	x.total += n
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if errors.Is(err, ErrTooLarge) {
			return err
		}
		return fmt.Errorf("%s: %q: write: %w", x.what, h.Name, err)
	}
	return nil
}

// symlink writes a link whose target stays inside the directory.
func (x *extractor) symlink(name string, h *tar.Header) error {
	t := h.Linkname
	if t == "" || path.IsAbs(t) || strings.HasPrefix(path.Clean(path.Join(path.Dir(name), t)), "../") ||
		path.Clean(path.Join(path.Dir(name), t)) == ".." {
		return fmt.Errorf("%s: %q: %w: symlink to %q leads out of the artifact", x.what, h.Name, ErrUnsafeEntry, t)
	}
	if err := x.root.Symlink(t, name); err != nil {
		return fmt.Errorf("%s: %q: %w: %v", x.what, h.Name, ErrUnsafeEntry, err)
	}
	x.links[name] = true
	return nil
}
