//go:build !linux

package sources

import "os/exec"

// killWithParent does nothing here: only Linux kills a child when its parent dies.
func killWithParent(*exec.Cmd) {}
