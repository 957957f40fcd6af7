package binary

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Cgroup is a memory cgroup that holds a process and every child it starts: the kernel
// charges the whole tree and, past the limit, reclaims and then OOM-kills inside it, as a
// container's limit does to a pod.
type Cgroup struct {
	dir string
	v2  bool
}

var cgroupSeq atomic.Int64

// NewCgroup makes a memory cgroup limited to limit bytes (swap included where the kernel
// accounts it), removed when t ends. It skips t, saying why, where this machine gives the
// test no writable memory cgroup (cgroup v2 with the memory controller, or v1's memory
// hierarchy).
func NewCgroup(t testing.TB, limit int64) *Cgroup {
	t.Helper()
	name := fmt.Sprintf("converge-e2e-%d-%d", os.Getpid(), cgroupSeq.Add(1))
	var cg *Cgroup
	if ctl, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && strings.Contains(string(ctl), "memory") {
		cg = &Cgroup{dir: filepath.Join("/sys/fs/cgroup", name), v2: true}
	} else if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err == nil {
		cg = &Cgroup{dir: filepath.Join("/sys/fs/cgroup/memory", name)}
	} else {
		t.Skip("no memory cgroup on this machine (neither cgroup v2 with the memory controller nor v1's memory hierarchy)")
	}
	if err := os.Mkdir(cg.dir, 0o755); err != nil {
		t.Skipf("memory cgroup not writable here: %v", err)
	}
	t.Cleanup(cg.remove)
	limitFiles := []string{"memory.limit_in_bytes", "memory.memsw.limit_in_bytes"}
	if cg.v2 {
		limitFiles = []string{"memory.max", "memory.swap.max"}
	}
	if err := cg.write(limitFiles[0], strconv.FormatInt(limit, 10)); err != nil {
		t.Fatal(err)
	}
	if cg.v2 {
		_ = cg.write(limitFiles[1], "0") // no swap: the limit is the memory
	} else {
		_ = cg.write(limitFiles[1], strconv.FormatInt(limit, 10)) // absent without swap accounting
	}
	return cg
}

func (c *Cgroup) write(file, value string) error {
	if err := os.WriteFile(filepath.Join(c.dir, file), []byte(value), 0o644); err != nil {
		return fmt.Errorf("cgroup %s: %w", file, err)
	}
	return nil
}

// remove deletes the cgroup once its processes are gone (killed with their parent).
func (c *Cgroup) remove() {
	for range 50 {
		if err := os.Remove(c.dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Peak is the most memory the cgroup's processes held at once, in bytes.
func (c *Cgroup) Peak() int64 {
	file := "memory.max_usage_in_bytes"
	if c.v2 {
		file = "memory.peak"
	}
	b, err := os.ReadFile(filepath.Join(c.dir, file))
	if err != nil {
		return -1
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// OOMKills is how many processes the kernel killed in the cgroup for passing its limit.
func (c *Cgroup) OOMKills() int {
	file := "memory.oom_control"
	if c.v2 {
		file = "memory.events"
	}
	b, err := os.ReadFile(filepath.Join(c.dir, file))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "oom_kill" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return 0
}

// StartIn runs converge with args inside cg: a shell joins the cgroup and execs converge in
// its place, so the binary and every child it starts are charged from their first byte.
func StartIn(t testing.TB, cg *Cgroup, args ...string) *Process {
	t.Helper()
	script := `echo $$ > "$CONVERGE_CGROUP/cgroup.procs" && exec "$@"`
	p := &Process{done: make(chan struct{})}
	p.cmd = exec.Command("/bin/sh", append([]string{"-c", script, "sh", Converge(t)}, args...)...)
	p.cmd.Env = append(os.Environ(), "CONVERGE_CGROUP="+cg.dir)
	return p.start(t)
}
