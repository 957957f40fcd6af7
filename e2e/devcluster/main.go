// Command devcluster runs the local control plane of e2e/cluster for people: `make cluster`
// starts it in the background and prints the kubeconfig path, `make cluster-down` stops it.
//
//	devcluster up   [--dir DIR] [--profile full|api]   start in the background, print the kubeconfig path
//	devcluster down [--dir DIR]                         stop it and wait until every process is gone
//	devcluster run  [--dir DIR] [--profile full|api]   run in the foreground until interrupted
//	devcluster publish [--dir DIR] [--demo-examples DIR] commit the examples to the demo git server
//
// With --demo-converge BIN, up and run also serve examples/ over git on loopback and run the
// converge daemon against it (the `make run` demo).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/converge-dev/converge/e2e/cluster"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: devcluster up|down|run [--dir DIR] [--profile full|api]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	dir := fs.String("dir", ".run/cluster", "working directory of the control plane")
	profile := fs.String("profile", string(cluster.Full), "api (etcd + kube-apiserver) or full (plus controllers, scheduler, kwok)")
	var d demo
	fs.StringVar(&d.converge, "demo-converge", "", "with up/run: also serve --demo-examples over git and run this converge binary against it")
	fs.StringVar(&d.examples, "demo-examples", "examples", "folder published as the demo repository")
	_ = fs.Parse(os.Args[2:])
	abs, err := filepath.Abs(*dir)
	if err == nil {
		switch os.Args[1] {
		case "up":
			err = up(abs, *profile, d)
		case "down":
			err = down(abs)
		case "publish":
			err = publish(abs, d.examples)
		case "run":
			err = run(abs, cluster.Profile(*profile), d)
		default:
			err = fmt.Errorf("unknown verb %q: want up, down or run", os.Args[1])
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "devcluster:", err)
		os.Exit(1)
	}
}

// run starts the control plane, writes DIR/pid and DIR/ready, and stops on SIGINT/SIGTERM.
func run(dir string, profile cluster.Profile, d demo) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(dir, "ready"))
	if err := os.WriteFile(filepath.Join(dir, "pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return err
	}
	opts := cluster.DefaultOptions()
	opts.Profile, opts.Dir = profile, dir
	c, err := cluster.Start(context.Background(), opts)
	if err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	stopDemo := func() {}
	if d.converge != "" {
		if d.examples, err = filepath.Abs(d.examples); err != nil {
			c.Stop()
			return err
		}
		if stopDemo, err = d.start(c); err != nil {
			c.Stop()
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "ready"), []byte(c.Kubeconfig+"\n"), 0o644); err != nil {
		c.Stop()
		return err
	}
	fmt.Printf("control plane (%s) ready; kubeconfig: %s\n", profile, c.Kubeconfig)
	<-sig
	stopDemo()
	c.Stop()
	_ = os.Remove(filepath.Join(dir, "ready"))
	_ = os.Remove(filepath.Join(dir, "pid"))
	return nil
}

// up starts `devcluster run` detached, waits until it is ready and prints the kubeconfig path
// on the last line.
func up(dir, profile string, d demo) error {
	if pid, ok := runningPID(dir); ok {
		kc, _ := os.ReadFile(filepath.Join(dir, "ready"))
		if len(kc) > 0 {
			fmt.Printf("already running (pid %d)\n%s", pid, kc)
			return nil
		}
		return fmt.Errorf("a control plane (pid %d) is starting or stuck in %s: run `make cluster-down`", pid, dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	logPath := filepath.Join(dir, "devcluster.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	args := []string{"run", "--dir", dir, "--profile", profile}
	if d.converge != "" {
		args = append(args, "--demo-converge", d.converge, "--demo-examples", d.examples)
	}
	cmd := exec.Command(self, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	_ = os.Remove(filepath.Join(dir, "ready"))
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.After(3 * time.Minute)
	for {
		select {
		case err := <-exited:
			log, _ := os.ReadFile(logPath)
			return fmt.Errorf("control plane failed to start (%v):\n%s", err, log)
		case <-deadline:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			return fmt.Errorf("control plane not ready after 3 minutes; see %s", logPath)
		case <-time.After(200 * time.Millisecond):
		}
		if kc, err := os.ReadFile(filepath.Join(dir, "ready")); err == nil {
			fmt.Printf("control plane (%s) running, pid %d, logs in %s\n", profile, cmd.Process.Pid, dir)
			if d.converge != "" {
				if err := report(dir, 3*time.Minute); err != nil {
					return err
				}
			}
			fmt.Print(string(kc))
			return nil
		}
	}
}

// down stops a control plane started by up and waits until its processes are gone.
func down(dir string) error {
	pid, ok := runningPID(dir)
	if !ok {
		fmt.Println("no control plane running in", dir)
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return err
	}
	for i := 0; i < 300; i++ {
		if _, ok := runningPID(dir); !ok {
			fmt.Println("control plane stopped")
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	return errors.New("control plane did not stop within 30s; killed its process group")
}

// runningPID returns the pid recorded in DIR/pid if that process is alive.
func runningPID(dir string) (int, bool) {
	data, err := os.ReadFile(filepath.Join(dir, "pid"))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil || strings.Contains(string(stat), ") Z ") {
		return 0, false
	}
	return pid, true
}
