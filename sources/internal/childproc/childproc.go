// Package childproc holds what the parent and the child of an isolated helper process
// share: the child's hard memory limit, its death with the parent, how the parent tells
// that a child ran out of memory, and a bounded buffer for the child's stderr. The render
// children of package sources and the SOPS decryption child use it.
package childproc

import (
	"bytes"
	"errors"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Start starts cmd with stdin as its input, its stderr kept in a TailBuffer (the first and
// last 4 KiB), to die with the parent, and waited for at most 5 s after its context ends;
// it returns the child's stdout.
func Start(cmd *exec.Cmd, stdin []byte) (io.ReadCloser, *TailBuffer, error) {
	cmd.Stdin = bytes.NewReader(stdin)
	stderr := &TailBuffer{Max: 4096, HeadMax: 4096}
	cmd.Stderr = stderr
	cmd.WaitDelay = 5 * time.Second
	KillWithParent(cmd)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	return stdout, stderr, nil
}

// ErrOverBound is the error of a Reader past its bound that was given no Err of its own.
var ErrOverBound = errors.New("answer over its bound")

// Reader counts the bytes read through R, failing with Err (ErrOverBound when nil; Over set)
// at the first read once Max were read: a child's answer read within its bound.
type Reader struct {
	R    io.Reader
	Max  int64
	N    int64
	Over bool
	Err  error
}

func (c *Reader) Read(p []byte) (int, error) {
	if c.N >= c.Max {
		c.Over = true
		if c.Err == nil {
			return 0, ErrOverBound // never (0, nil): a reader would loop on it
		}
		return 0, c.Err
	}
	p = p[:min(int64(len(p)), c.Max-c.N+1)]
	n, err := c.R.Read(p)
	c.N += int64(n)
	return n, err
}

// OutOfMemory reports whether a child ended for want of memory: the Go runtime's fatal
// error when the kernel refuses it address space (in head, the first bytes of its stderr,
// before the goroutine dump; the race detector's own, and the race runtime's "too many
// address space collisions" when its heap cannot grow, when built with it), or, when the
// parent did not kill it (killed), a SIGKILL: the kernel's OOM killer.
func OutOfMemory(err error, head []byte, killed bool) bool {
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		return false
	}
	if ws, ok := exit.Sys().(syscall.WaitStatus); ok && !killed && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
		return true
	}
	h := string(head)
	for _, s := range []string{"out of memory", "cannot allocate memory", "errno=12", "pthread_create failed",
		"failed to create new OS thread", "ThreadSanitizer failed to allocate",
		"too many address space collisions"} {
		if strings.Contains(h, s) {
			return true
		}
	}
	return false
}

// TailBuffer keeps the last Max bytes written to it, and the first HeadMax apart.
type TailBuffer struct {
	Max     int
	buf     []byte
	HeadMax int
	head    []byte
}

func (b *TailBuffer) Write(p []byte) (int, error) {
	if n := min(b.HeadMax-len(b.head), len(p)); n > 0 {
		b.head = append(b.head, p[:n]...)
	}
	b.buf = append(b.buf, p...)
	if len(b.buf) > b.Max {
		b.buf = b.buf[len(b.buf)-b.Max:]
	}
	return len(p), nil
}

// String returns the last Max bytes written.
func (b *TailBuffer) String() string { return string(b.buf) }

// Head returns the first HeadMax bytes written.
func (b *TailBuffer) Head() []byte { return b.head }
