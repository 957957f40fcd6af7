package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/e2e/binary"
	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/e2e/gitserver"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// readmeBlock matches a shell block of README.md marked for this test.
var readmeBlock = regexp.MustCompile("(?s)<!-- readme-test: ([a-z-]+) -->\n```sh\n(.*?)```")

// exitsRE reads the exit code a README command announces ("# exits 1: …").
var exitsRE = regexp.MustCompile(`#\s*exits (\d+)`)

// TestReadmeFirstSyncAndApply runs README's "Your first Sync" and "Your first CLI apply"
// as written, in a folder laid out as `make run` leaves the clone (bin/converge,
// examples/, .run/cluster/kubeconfig and .run/cluster/demo naming the demo git server),
// with the daemon started as `make run` starts it (watching converge-demo only, so it
// leaves other tests' Syncs alone): each command exits as the README says, and the
// objects they promise exist.
func TestReadmeFirstSyncAndApply(t *testing.T) {
	cluster.Require(t, env)
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := map[string]string{}
	for _, m := range readmeBlock.FindAllStringSubmatch(string(readme), -1) {
		blocks[m[1]] = m[2]
	}
	if blocks["first-sync"] == "" || blocks["first-apply"] == "" {
		t.Fatalf("README.md has no marked first-sync and first-apply blocks (found %d)", len(blocks))
	}
	work := readmeWorkdir(t)
	c := env.Client(t, v1alpha1.AddToScheme)
	t.Cleanup(func() { readmeCleanup(t, c) })
	// As make run does before it prints its table: the daemon has installed the CRD and
	// created the demo Sync.
	err = wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		return c.Get(ctx, client.ObjectKey{Namespace: "converge-demo", Name: "demo"}, &v1alpha1.Sync{}) == nil, nil
	})
	if err != nil {
		t.Fatalf("the demo Sync was not created: %v", err)
	}
	for _, name := range []string{"first-sync", "first-apply"} {
		script := readmeScript(blocks[name])
		cmd := exec.Command("bash", "-c", script)
		cmd.Dir = work
		cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + os.Getenv("HOME")}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("README %s, run as written: %v\n%s", name, err, out)
		}
		t.Logf("README %s:\n%s", name, out)
	}
	ctx := context.Background()
	for _, key := range []client.ObjectKey{{Namespace: "converge-demo", Name: "hello"}, {Namespace: "default", Name: "hello"}} {
		cm := &corev1.ConfigMap{}
		if err := c.Get(ctx, key, cm); err != nil || cm.Data["greeting"] != "hello from converge" {
			t.Errorf("ConfigMap %s: %v %v", key, cm.Data, err)
		}
	}
}

// readmeScript turns a README block into a script that runs each command and stops at the
// first whose exit code is not the one its comment announces (0 when it says none).
func readmeScript(block string) string {
	var b strings.Builder
	lines := strings.Split(strings.TrimRight(block, "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		cmd := lines[i]
		if heredoc := strings.Index(cmd, "<<"); heredoc >= 0 {
			end := strings.TrimSpace(cmd[heredoc+2:])
			for i++; i < len(lines); i++ {
				cmd += "\n" + lines[i]
				if strings.TrimSpace(lines[i]) == end {
					break
				}
			}
		}
		first := strings.SplitN(cmd, "\n", 2)[0]
		want := 0
		if m := exitsRE.FindStringSubmatch(first); m != nil {
			want, _ = strconv.Atoi(m[1])
		}
		fmt.Fprintf(&b, "echo '$ %s'\n%s\nrc=$?\nif [ $rc -ne %d ]; then echo \"exit $rc, the README says %d\"; exit 1; fi\n",
			strings.ReplaceAll(first, "'", `'\''`), cmd, want, want)
	}
	return b.String()
}

// readmeWorkdir lays out a folder as `make run` leaves the clone and starts the demo's git
// server and daemon, and returns the folder.
func readmeWorkdir(t *testing.T) string {
	t.Helper()
	work := t.TempDir()
	examples, err := filepath.Abs("../examples")
	if err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(work, ".run", "cluster")
	for _, dir := range []string{filepath.Join(work, "bin"), run} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(binary.Converge(t), filepath.Join(work, "bin", "converge")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(examples, filepath.Join(work, "examples")); err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := os.ReadFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(run, "kubeconfig"), kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := gitserver.Start(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	if _, err := srv.Publish("examples", "main", examples, "examples"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(run, "demo"), []byte("git="+srv.RepoURL("examples")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	binary.Start(t, "run", "--kubeconfig", filepath.Join(run, "kubeconfig"), "-n", "converge-demo", "--watch-namespace", "converge-demo",
		"--git-url", srv.RepoURL("examples"), "--ref", "main", "--path", "demo/overlays/local", "--name", "demo", "--interval", "30s",
		"--metrics-addr", "0", "--health-addr", cluster.FreeAddr(), "--git-cache-dir", t.TempDir(), "--allow-local-git")
	return work
}

// readmeCleanup removes what the README's commands made, while the daemon still runs to
// let its Syncs go (their finalizers), within a bound.
func readmeCleanup(t *testing.T, c client.Client) {
	wctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_ = c.DeleteAllOf(wctx, &v1alpha1.Sync{}, client.InNamespace("converge-demo"))
	_ = wait.PollUntilContextCancel(wctx, time.Second, true, func(ctx context.Context) (bool, error) {
		list := &v1alpha1.SyncList{}
		err := c.List(ctx, list, client.InNamespace("converge-demo"))
		return err == nil && len(list.Items) == 0, nil
	})
	ctx, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	for _, key := range []client.ObjectKey{{Namespace: "default", Name: "hello"}, {Namespace: "default", Name: "hello-cli"}} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
		if err := c.Delete(ctx, cm); err != nil && !apierrors.IsNotFound(err) {
			t.Logf("cleanup %s: %v", key, err)
		}
	}
	for _, ns := range []string{"converge-demo", "demo"} {
		_ = c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
}
