//go:build !unix

package diskuse

import "io/fs"

// usage is the disk a file takes: its size where the system does not count blocks.
func usage(info fs.FileInfo) int64 {
	if info.IsDir() {
		return BlockSize
	}
	return Round(info.Size())
}
