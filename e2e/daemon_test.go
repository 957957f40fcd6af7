package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/converge-dev/converge/e2e/binary"
	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/e2e/gitserver"
)

var env *cluster.Cluster

func TestMain(m *testing.M) { cluster.Main(m, cluster.API, &env) }

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

	health := cluster.FreeAddr()
	args := func(healthAddr string) []string {
		return []string{"run", "--kubeconfig", env.Kubeconfig, "-n", ns, "--watch-namespace", ns,
			"--git-url", srv.RepoURL("app"), "--ref", "main", "--path", ".", "--name", "app", "--interval", "2s",
			"--metrics-addr", "0", "--health-addr", healthAddr, "--leader-election-namespace", ns,
			"--git-cache-dir", t.TempDir(), "--allow-local-git"}
	}
	a := binary.Start(t, args(health)...)

	c := directClient(t)
	waitReady := func(rev string) { t.Helper(); waitSyncReady(t, c, ns, rev) }
	waitReady(rev1)

	resp, err := http.Get("http://" + health + "/healthz")
	if err != nil {
		t.Fatalf("/healthz: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz answered %d", resp.StatusCode)
	}

	b := binary.Start(t, args(cluster.FreeAddr())...)
	rev2 := publish("2")
	waitReady(rev2)
	if n := strings.Count(b.Log(), `"reconciled"`); n != 0 {
		t.Errorf("the second replica reconciled %d times while the first led", n)
	}

	if err := a.Kill(); err != nil {
		t.Fatal(err)
	}
	rev3 := publish("3")
	waitReady(rev3)
	// The replica logs "reconciled" after its status write, which the wait may see first.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(b.Log(), `"reconciled"`) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(b.Log(), `"reconciled"`) {
		t.Errorf("the second replica never reconciled after the leader was killed")
	}
}
