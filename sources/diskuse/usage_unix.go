//go:build unix

package diskuse

import (
	"io/fs"
	"syscall"
)

// usage is the disk a file takes: its allocated blocks.
func usage(info fs.FileInfo) int64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return info.Size()
}
