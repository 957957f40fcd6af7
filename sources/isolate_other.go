//go:build !linux

package sources

import (
	"os/exec"
	"runtime/debug"
)

// killWithParent does nothing here: only Linux kills a child when its parent dies.
func killWithParent(*exec.Cmd) {}

// limitMemory can only set the Go runtime's soft limit here: the hard limit is Linux's.
func limitMemory(budget int64) error {
	debug.SetMemoryLimit(budget * 3 / 4)
	return nil
}
