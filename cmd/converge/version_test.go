package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/converge-dev/converge/cmd/converge/internal/installer"
	"github.com/converge-dev/converge/e2e/cluster"
)

// TestVersionPrintsOnStdout: "converge version --client" and "converge --version" print the
// same line on stdout, so $(converge version --client) holds it (without it: the bare
// version went to stderr, and --version printed "converge version dev").
func TestVersionPrintsOnStdout(t *testing.T) {
	for _, args := range [][]string{{"version", "--client"}, {"--version"}} {
		out, errOut, code := runOffline(args...)
		if code != 0 || out != "converge: "+version+"\n" || errOut != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %q on stdout", args, code, out, errOut, "converge: "+version+"\n")
		}
	}
	out, _, code := runOffline("version", "--client", "-o", "json")
	var info versionInfo
	if err := json.Unmarshal([]byte(out), &info); code != 0 || err != nil || info.Client.Version != version || info.Daemon != nil {
		t.Errorf("-o json: exit %d, %q (%v)", code, out, err)
	}
}

// TestVersionNamesTheDaemon: "converge version" names the daemon's image tag from the
// Deployment "converge install" creates, says when none is installed, and with no cluster
// prints the client's line and exits 2 saying what to do.
func TestVersionNamesTheDaemon(t *testing.T) {
	cluster.Require(t, env)
	out, code := cli(t, "version")
	if code != 0 || !strings.Contains(out, "converge: "+version) || !strings.Contains(out, "daemon: not installed") {
		t.Fatalf("without a daemon: exit %d\n%s", code, out)
	}
	c := env.Client(t)
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: installer.Namespace}}
	_ = c.Create(ctx, ns)
	labels := map[string]string{"app": "converge-version-test"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: installer.Namespace, Name: installer.DaemonName},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "manager", Image: installer.BaseImage + ":v9.8.7"}}}}}}
	if err := c.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), dep) })
	out, code = cli(t, "version", "-o", "json")
	var info versionInfo
	if err := json.Unmarshal([]byte(out), &info); code != 0 || err != nil || info.Daemon == nil || info.Daemon.Version != "v9.8.7" {
		t.Errorf("-o json with a daemon: exit %d, %q (%v)", code, out, err)
	}
	cmd := newRootCommand()
	var stdout, stderr bytes.Buffer
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	cmd.SetArgs([]string{"--kubeconfig", "/nonexistent", "--server", "https://127.0.0.1:1", "version"})
	err := cmd.ExecuteContext(ctx)
	if err == nil || exitCode(err) != 2 || !strings.Contains(stdout.String(), "converge: "+version) || !strings.Contains(err.Error(), "--kubeconfig") {
		t.Errorf("no cluster: %v, stdout %q; want exit 2 after the client's line, saying what to do", err, stdout.String())
	}
}
