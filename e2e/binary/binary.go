// Package binary builds the converge binary once per test process and runs it as a child
// process with its output captured, for black-box tests. Production code must not import it.
package binary

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	path      string
	buildErr  error
)

// Converge builds github.com/converge-dev/converge/cmd/converge once and returns its path,
// with cmd/converge-decrypt beside it, where converge finds its SOPS decryption program.
func Converge(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "converge-e2e-bin-")
		if err != nil {
			buildErr = err
			return
		}
		path = filepath.Join(dir, "converge")
		for _, name := range []string{"converge-decrypt", "converge"} {
			// Static, as `make build` and the image build them: no cgo.
			build := exec.Command("go", "build", "-o", filepath.Join(dir, name), "github.com/converge-dev/converge/cmd/"+name)
			build.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := build.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go build %s: %v\n%s", name, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return path
}

// Process is a running converge with its stdout and stderr captured.
type Process struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
}

// Start runs converge with args. It is stopped (interrupted, killed after 45 s) when t ends,
// and its output is logged when t failed. It dies with the test process (Pdeathsig).
func Start(t testing.TB, args ...string) *Process {
	t.Helper()
	p := &Process{cmd: exec.Command(Converge(t), args...), done: make(chan struct{})}
	return p.start(t)
}

// start starts p.cmd with its output captured, stopped when t ends.
func (p *Process) start(t testing.TB) *Process {
	t.Helper()
	p.cmd.Stdout, p.cmd.Stderr = p, p
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("converge %d output:\n%s", p.cmd.Process.Pid, p.Log())
		}
	})
	return p
}

// Write captures output.
func (p *Process) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

// Log returns the output so far.
func (p *Process) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// Pause stops the process with SIGSTOP, as a frozen VM or a stalled node would.
func (p *Process) Pause() error { return p.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused process (SIGCONT).
func (p *Process) Resume() error { return p.cmd.Process.Signal(syscall.SIGCONT) }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Kill ends the process with SIGKILL, like a crash, and waits for it.
func (p *Process) Kill() error {
	err := p.cmd.Process.Kill()
	<-p.done
	return err
}

// Stop interrupts the process and waits for a graceful exit; after 45 s it kills it and
// reports that it ignored the interrupt. Stopping an ended process does nothing.
func (p *Process) Stop() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
		return nil
	case <-time.After(45 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("converge %d ignored the interrupt; killed", p.cmd.Process.Pid)
	}
}
