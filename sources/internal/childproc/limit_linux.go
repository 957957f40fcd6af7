package childproc

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime/debug"
	"strconv"
	"syscall"
)

// KillWithParent makes the kernel kill the child when its parent dies.
func KillWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// runtimeMargin is address space a child's Go runtime may still reserve after it measured
// itself (thread stacks, allocator metadata), on top of its budget. A cgo build (the race
// detector's, tests') starts each thread with pthread's 8 MiB stack reservation, never
// touched: it gets more (cgoThreadMargin), so a busy machine starting threads does not fail
// work that fits. The shipped binaries are built without cgo.
const runtimeMargin = 64<<20 + cgoThreadMargin

// LimitMemory puts this process under a hard memory limit: the kernel refuses it address
// space past what it holds now (the Go runtime reserves about 1.3 GiB of it at start,
// nearly all never touched) plus budget, and it lowers the hard limit too, so nothing in
// the process can raise it back. The Go runtime collects hard from three quarters of
// budget on, so work that fits does not die of garbage.
func LimitMemory(budget int64) error {
	statm, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return fmt.Errorf("memory limit: %w", err)
	}
	pages, err := strconv.ParseInt(string(bytes.Fields(statm)[0]), 10, 64)
	if err != nil {
		return fmt.Errorf("memory limit: statm: %w", err)
	}
	limit := uint64(pages*int64(os.Getpagesize()) + runtimeMargin + budget)
	if err := syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: limit, Max: limit}); err != nil {
		return fmt.Errorf("memory limit: setrlimit: %w", err)
	}
	debug.SetMemoryLimit(budget * 3 / 4)
	return nil
}
