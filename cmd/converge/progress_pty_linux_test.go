//go:build linux

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/converge-dev/converge/e2e/cluster"
)

// TestApplyCLIProgressOnTerminal runs "converge apply" with stderr on a pseudo-terminal, as
// a person at a terminal would: for text and markdown the progress line is drawn there and
// erased before the report, and stdout carries none of it; -o json and yaml draw nothing.
func TestApplyCLIProgressOnTerminal(t *testing.T) {
	cluster.Require(t, env)
	ns := env.Namespace(t)
	dir := filepath.Join(t.TempDir(), "app")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeSet(t, dir, ns, map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "1", 1), "b.yaml": cmB})
	for _, tc := range []struct {
		output string
		drawn  bool
	}{
		{"", true},
		{"markdown", true},
		{"json", false},
		{"yaml", false},
	} {
		args := []string{"--kubeconfig", env.Kubeconfig, "apply", dir, "-n", ns, "--dry-run"}
		if tc.output != "" {
			args = append(args, "-o", tc.output)
		}
		stdout, stderr, code := runOnTerminal(t, args...)
		if code != exitCodeChanges {
			t.Errorf("-o %q: exit code %d, want %d", tc.output, code, exitCodeChanges)
		}
		if strings.ContainsAny(stdout, "\r\x1b") || strings.Contains(stdout, "applying") {
			t.Errorf("-o %q: progress on stdout: %q", tc.output, stdout)
		}
		switch {
		case tc.drawn && (!strings.HasPrefix(stderr, clearLine+"applying 0/2") ||
			!strings.Contains(stderr, "applying 2/2") || !strings.HasSuffix(stderr, "2/2"+clearLine)):
			t.Errorf("-o %q: the terminal shows %q; want the line drawn from 0/2 to 2/2, then erased", tc.output, stderr)
		case !tc.drawn && stderr != "":
			t.Errorf("-o %q: the terminal shows %q; want nothing", tc.output, stderr)
		}
	}
}

// runOnTerminal runs converge with stderr on a new pseudo-terminal and returns stdout, what
// the terminal received, and the exit code.
func runOnTerminal(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	master, slave := openPTY(t)
	defer master.Close()
	cmd := newRootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(slave)
	cmd.SetArgs(args)
	code := 0
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		code = exitCode(err)
	}
	if err := slave.Close(); err != nil {
		t.Fatal(err)
	}
	drawn, _ := io.ReadAll(master) // ends with EIO once the buffered bytes are read
	return out.String(), string(drawn), code
}

// openPTY opens a pseudo-terminal pair (master, slave), or skips the test where there is none.
func openPTY(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	var unlock int32
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		master.Close()
		t.Skipf("unlock pseudo-terminal: %v", e)
	}
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		master.Close()
		t.Skipf("pseudo-terminal number: %v", e)
	}
	slave, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		t.Skipf("open pseudo-terminal: %v", err)
	}
	return master, slave
}
