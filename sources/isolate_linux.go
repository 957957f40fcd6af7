package sources

import (
	"os/exec"
	"syscall"
)

// killWithParent makes the kernel kill a render child when the daemon dies.
func killWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
