package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/e2e/gitserver"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// demo is the `make run` experience on top of a running control plane: a git server on
// loopback seeded from examples/, and the converge daemon syncing examples/demo/overlays/local.
type demo struct {
	converge string // path of the converge binary
	examples string // folder published as the "examples" repository
}

const (
	demoNamespace = "converge-demo"
	demoSync      = "demo"
	demoPath      = "demo/overlays/local"
)

// start serves and publishes the examples and starts the daemon; it returns the processes'
// stop function.
func (d demo) start(c *cluster.Cluster) (stop func(), err error) {
	gitRoot := filepath.Join(c.Dir, "git")
	if err := os.MkdirAll(gitRoot, 0o755); err != nil {
		return nil, err
	}
	srv, err := startGit(c.Dir, gitRoot)
	if err != nil {
		return nil, err
	}
	sha, err := srv.Publish("examples", "main", d.examples, "examples from "+d.examples)
	if err != nil {
		_ = srv.Close()
		return nil, err
	}
	metricsAddr, healthAddr := cluster.FreeAddr(), cluster.FreeAddr()
	logFile, err := os.Create(filepath.Join(c.Dir, "converge.log"))
	if err != nil {
		_ = srv.Close()
		return nil, err
	}
	cmd := exec.Command(d.converge, "run", "--kubeconfig", c.Kubeconfig, "-n", demoNamespace,
		"--git-url", srv.RepoURL("examples"), "--ref", "main", "--path", demoPath, "--name", demoSync,
		"--interval", "30s", "--metrics-addr", metricsAddr, "--health-addr", healthAddr,
		"--git-cache-dir", filepath.Join(c.Dir, "converge-cache"),
		"--allow-local-git") // the demo's git server listens on loopback
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = srv.Close()
		return nil, fmt.Errorf("start %s: %w", d.converge, err)
	}
	info := fmt.Sprintf("git=%s\nrevision=main@sha1:%s\nmetrics=http://%s/metrics\nhealth=http://%s/healthz\n",
		srv.RepoURL("examples"), sha, metricsAddr, healthAddr)
	if err := os.WriteFile(filepath.Join(c.Dir, "demo"), []byte(info), 0o644); err != nil {
		return nil, err
	}
	return func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
		}
		_ = srv.Close()
	}, nil
}

// report waits (up to timeout) for the demo Sync to be Ready and prints a status table and
// where to look next.
func report(dir string, timeout time.Duration) error {
	kubeconfig := filepath.Join(dir, "kubeconfig")
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	info, _ := os.ReadFile(filepath.Join(dir, "demo"))
	want := ""
	for _, line := range strings.Split(string(info), "\n") {
		if v, ok := strings.CutPrefix(line, "revision="); ok {
			want = v
		}
	}
	s := &v1alpha1.Sync{}
	key := client.ObjectKey{Namespace: demoNamespace, Name: demoSync}
	waitErr := wait.PollUntilContextTimeout(context.Background(), time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, s); err != nil {
			return false, nil
		}
		return s.Status.ObservedGeneration == s.Generation && s.Status.LastAppliedRevision == want &&
			meta.IsStatusConditionTrue(s.Status.Conditions, v1alpha1.ConditionReady), nil
	})
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nNAMESPACE\tNAME\tREADY\tREVISION\tMESSAGE")
	ready := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
	st, msg := "Unknown", "not reconciled yet"
	if ready != nil {
		st, msg = string(ready.Status), ready.Message
	}
	fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", key.Namespace, key.Name, st, s.Status.LastAppliedRevision, msg)
	_ = tw.Flush()
	fmt.Printf("\n%s", info)
	fmt.Printf("daemon log: %s\n", filepath.Join(dir, "converge.log"))
	if waitErr != nil {
		return fmt.Errorf("the demo Sync is not Ready after %s; see the daemon log", timeout)
	}
	return nil
}

// publish commits the examples folder to the demo repository served from dir/git.
func publish(dir, examples string) error {
	srv := &gitserver.Server{Root: filepath.Join(dir, "git")}
	sha, err := srv.Publish("examples", "main", examples, "examples from "+examples)
	if err != nil {
		return err
	}
	fmt.Printf("published %s as main@sha1:%s; the demo Sync applies it within its 30s interval\n", examples, sha)
	return nil
}

// startGit serves gitRoot on the address the last demo of dir used when it is free, else
// on a new one, and records it: Syncs a user created against the demo's git server keep
// fetching after the next make run.
func startGit(dir, gitRoot string) (*gitserver.Server, error) {
	addrFile := filepath.Join(dir, "git-addr")
	if last, err := os.ReadFile(addrFile); err == nil {
		if srv, err := gitserver.Start(gitRoot, strings.TrimSpace(string(last))); err == nil {
			return srv, nil
		}
	}
	srv, err := gitserver.Start(gitRoot, cluster.FreeAddr())
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(addrFile, []byte(strings.TrimPrefix(srv.URL, "http://")+"\n"), 0o644); err != nil {
		_ = srv.Close()
		return nil, err
	}
	return srv, nil
}
