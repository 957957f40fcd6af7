//go:build !unix

package git

import "io/fs"

// diskUsage is the disk a file takes: its size where the system does not count blocks.
func diskUsage(info fs.FileInfo) int64 {
	if info.IsDir() {
		return blockSize
	}
	return onDisk(info.Size())
}
