//go:build unix

package git

import (
	"io/fs"
	"syscall"
)

// diskUsage is the disk a file takes: its allocated blocks.
func diskUsage(info fs.FileInfo) int64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return info.Size()
}
