//go:build !linux

package childproc

import (
	"os/exec"
	"runtime/debug"
)

// KillWithParent does nothing here: only Linux kills a child when its parent dies.
func KillWithParent(*exec.Cmd) {}

// LimitMemory can only set the Go runtime's soft limit here: the hard limit is Linux's.
func LimitMemory(budget int64) error {
	debug.SetMemoryLimit(budget * 3 / 4)
	return nil
}
