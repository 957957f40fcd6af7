// Package diskuse measures the disk a source cache's folders take: the blocks of their
// files, folders and symlinks, so that many tiny files count as what they cost (a file of
// one byte takes a block), where the system reports blocks, and their sizes elsewhere.
package diskuse

import (
	"io/fs"
	"path/filepath"
)

// BlockSize is what an estimate rounds a file up to, and counts per folder.
const BlockSize = 4096

// Of returns the disk dir and everything under it take.
func Of(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if info, err := d.Info(); err == nil {
			n += usage(info)
		}
		return nil
	})
	return n
}

// Round rounds n bytes up to whole blocks: the disk a file of n bytes takes at most.
func Round(n int64) int64 {
	return (n + BlockSize - 1) / BlockSize * BlockSize
}
