package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/e2e/gitserver"
	"github.com/converge-dev/converge/status"
)

var env *cluster.Cluster

func TestMain(m *testing.M) { cluster.Main(m, cluster.API, &env) }

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// convergeBinary builds cmd/converge once per test run.
func convergeBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "converge-e2e-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "converge")
		out, err := exec.Command("go", "build", "-o", binary, "../cmd/converge").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

// daemon is one converge process with its output captured.
type daemon struct {
	cmd *exec.Cmd
	mu  sync.Mutex
	out bytes.Buffer
}

func (d *daemon) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.out.Write(p)
}

func (d *daemon) log() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.out.String()
}

func startBinary(t *testing.T, args ...string) *daemon {
	t.Helper()
	d := &daemon{}
	d.cmd = exec.Command(convergeBinary(t), args...)
	d.cmd.Stdout, d.cmd.Stderr = d, d
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = d.cmd.Process.Kill()
		_ = d.cmd.Wait()
		if t.Failed() {
			t.Logf("daemon %d output:\n%s", d.cmd.Process.Pid, d.log())
		}
	})
	return d
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestBinaryQuickStartAndHandover runs the built binary with the quick-start flags: the Sync
// becomes Ready at the head revision with observedGeneration == generation (I4, I6); /healthz
// answers; a second replica stays passive while the first leads, and takes over and applies
// the next commit after the leader is killed with SIGKILL (S03).
func TestBinaryQuickStartAndHandover(t *testing.T) {
	cluster.Require(t, env)
	ns := env.Namespace(t)
	srv, err := gitserver.Start(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	src := t.TempDir()
	publish := func(version string) string {
		cm := fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app, namespace: %s}\ndata: {version: %q}\n", ns, version)
		if err := os.WriteFile(filepath.Join(src, "cm.yaml"), []byte(cm), 0o644); err != nil {
			t.Fatal(err)
		}
		sha, err := srv.Publish("app", "main", src, "version "+version)
		if err != nil {
			t.Fatal(err)
		}
		return "main@sha1:" + sha
	}
	rev1 := publish("1")

	health := freeAddr(t)
	args := func(healthAddr string) []string {
		return []string{"run", "--kubeconfig", env.Kubeconfig, "-n", ns, "--watch-namespace", ns,
			"--git-url", srv.RepoURL("app"), "--ref", "main", "--path", ".", "--name", "app", "--interval", "2s",
			"--metrics-addr", "0", "--health-addr", healthAddr, "--leader-election-namespace", ns,
			"--cache-dir", t.TempDir()}
	}
	a := startBinary(t, args(health)...)

	scheme := runtime.NewScheme()
	if err := status.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	waitReady := func(rev string) {
		t.Helper()
		s := &status.Sync{}
		err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, s); err != nil {
				return false, nil
			}
			return s.Status.ObservedGeneration == s.Generation && s.Status.LastAppliedRevision == rev &&
				meta.IsStatusConditionTrue(s.Status.Conditions, status.ConditionReady), nil
		})
		if err != nil {
			t.Fatalf("Sync never Ready at %s: generation %d, status %+v", rev, s.Generation, s.Status)
		}
	}
	waitReady(rev1)

	resp, err := http.Get("http://" + health + "/healthz")
	if err != nil {
		t.Fatalf("/healthz: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz answered %d", resp.StatusCode)
	}

	b := startBinary(t, args(freeAddr(t))...)
	rev2 := publish("2")
	waitReady(rev2)
	if n := strings.Count(b.log(), `"reconciled"`); n != 0 {
		t.Errorf("the second replica reconciled %d times while the first led", n)
	}

	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	rev3 := publish("3")
	waitReady(rev3)
	if !strings.Contains(b.log(), `"reconciled"`) {
		t.Errorf("the second replica never reconciled after the leader was killed")
	}
}
