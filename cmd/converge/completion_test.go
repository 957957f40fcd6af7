package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestCompletion runs cobra's completion requests as a shell does (`converge __complete
// ARGS... PREFIX`): Sync names for status, get, reconcile and the verbs about one Sync, namespaces for -n, contexts for
// --context. With the cluster unreachable a completion offers nothing, returns at once, and
// writes no error.
func TestCompletion(t *testing.T) {
	ns, _ := statusFixture(t)
	kc := env.Kubeconfig
	for _, tc := range []struct {
		args []string
		want string // the offers, one per line, then cobra's directive
	}{
		{[]string{"status", "--kubeconfig", kc, "-n", ns, ""}, "api\nweb\n:4\n"},
		{[]string{"status", "--kubeconfig", kc, "-n", ns, "web", ""}, "api\n:4\n"},
		{[]string{"get", "--kubeconfig", kc, "-n", ns, "s"}, "syncs\n:4\n"},
		{[]string{"get", "syncs", "--kubeconfig", kc, "-n", ns, "w"}, "web\n:4\n"},
		{[]string{"get", "pods", "--kubeconfig", kc, "-n", ns, ""}, ":4\n"},
		{[]string{"reconcile", "--kubeconfig", kc, "-n", ns, "a"}, "api\n:4\n"},
		{[]string{"reconcile", "--kubeconfig", kc, "-n", ns, "api", ""}, ":4\n"},
		{[]string{"tree", "--kubeconfig", kc, "-n", ns, "w"}, "web\n:4\n"},
		{[]string{"events", "--kubeconfig", kc, "-n", ns, ""}, "api\nweb\n:4\n"},
		{[]string{"suspend", "--kubeconfig", kc, "-n", ns, "a"}, "api\n:4\n"},
		{[]string{"resume", "--kubeconfig", kc, "-n", ns, "web", ""}, ":4\n"},
		{[]string{"diff", "--kubeconfig", kc, "-n", ns, "w"}, "web\n:4\n"},
		{[]string{"tree", "--kubeconfig", kc, "-n", ns, "web", "-o", ""}, "table\njson\nyaml\n:4\n"},
		{[]string{"status", "--kubeconfig", kc, "-n", ns}, ns + "\n:4\n"},
		{[]string{"status", "--kubeconfig", kc, "--context", ""}, "converge-local\n:4\n"},
	} {
		out, _, code := runOffline(append([]string{"__complete"}, tc.args...)...)
		if code != 0 || out != tc.want {
			t.Errorf("__complete %s: exit %d, got %q, want %q", strings.Join(tc.args, " "), code, out, tc.want)
		}
	}

	unreachable := unreachableKubeconfig(t)
	for _, args := range [][]string{
		{"status", "--kubeconfig", unreachable, ""},
		{"get", "syncs", "--kubeconfig", unreachable, ""},
		{"status", "--kubeconfig", unreachable, "-n", ""},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := newRootCommand()
		var out, errOut strings.Builder
		cmd.SetOut(&out)
		cmd.SetErr(&errOut)
		cmd.SetArgs(append([]string{"__complete"}, args...))
		err := cmd.ExecuteContext(ctx)
		if err != nil || ctx.Err() != nil || out.String() != ":4\n" || strings.Contains(errOut.String(), "rror") {
			t.Errorf("__complete %s with the cluster unreachable: %v, ctx %v, stdout %q, stderr %q; want no offer, no error",
				strings.Join(args, " "), err, ctx.Err(), out.String(), errOut.String())
		}
		cancel()
	}
}
