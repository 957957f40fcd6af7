package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// lockedBuffer is a bytes.Buffer a running command writes while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestStatusWatch runs `converge status -w` and `get syncs -w -o name` as a user leaves
// them running: they print the list, then a row (a name) each time a Sync changes, until
// interrupted (here: the context ends), and exit 0. The change is the api Sync failing
// after the list was printed.
func TestStatusWatch(t *testing.T) {
	ns, c := statusFixture(t)
	type watcher struct {
		args []string
		out  lockedBuffer
		done chan error
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	watchers := []*watcher{
		{args: []string{"status", "-n", ns, "-w"}},
		{args: []string{"get", "syncs", "-n", ns, "api", "-w", "-o", "name"}},
	}
	for _, w := range watchers {
		w.done = make(chan error, 1)
		cmd := newRootCommand()
		cmd.SetOut(&w.out)
		cmd.SetErr(&w.out)
		cmd.SetArgs(append([]string{"--kubeconfig", env.Kubeconfig}, w.args...))
		go func() { w.done <- cmd.ExecuteContext(ctx) }()
	}
	waitOutput := func(w *watcher, what string, cond func(string) bool) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			select {
			case err := <-w.done:
				t.Fatalf("%s: ended (%v) before %s; output:\n%s", strings.Join(w.args, " "), err, what, w.out.String())
			default:
			}
			return cond(w.out.String()), nil
		})
		if err != nil {
			t.Fatalf("%s: %s never came; output:\n%s", strings.Join(w.args, " "), what, w.out.String())
		}
	}
	for _, w := range watchers {
		waitOutput(w, "the list", func(s string) bool { return strings.Contains(s, "api") })
	}

	api := &v1alpha1.Sync{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "api"}, api); err != nil {
		t.Fatal(err)
	}
	api.Status.LastAttemptedRevision = rev2
	meta.SetStatusCondition(&api.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady,
		Status: metav1.ConditionFalse, Reason: "ApplyFailed", Message: "ConfigMap/x: forbidden"})
	if err := c.Status().Update(ctx, api); err != nil {
		t.Fatal(err)
	}
	table, names := watchers[0], watchers[1]
	waitOutput(table, "a row for the change", func(s string) bool {
		return strings.Contains(s, "revision "+rev2+" failed: ConfigMap/x: forbidden")
	})
	waitOutput(names, "the name again", func(s string) bool { return strings.Count(s, "sync.converge.dev/api\n") == 2 })
	cancel()
	for _, w := range watchers {
		if err := <-w.done; err != nil {
			t.Errorf("%s: %v after the interrupt; want exit 0", strings.Join(w.args, " "), err)
		}
	}
	lines := strings.Split(strings.TrimSpace(table.out.String()), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "NAME ") || strings.Contains(strings.Join(lines[1:], "\n"), "NAME ") {
		t.Errorf("status -w: want the header once, the two Syncs, and one row for the change:\n%s", table.out.String())
	}
	if got := names.out.String(); got != "sync.converge.dev/api\nsync.converge.dev/api\n" {
		t.Errorf("get syncs api -w -o name: got %q, want the name of api, then again for its change", got)
	}
}
