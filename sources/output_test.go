package sources

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/converge-dev/converge/sources/internal/childproc"
)

// generatorTree returns a source whose kustomization "k" generates one ConfigMap holding a
// file of size bytes: the render child answers a little more than size bytes.
func generatorTree(t *testing.T, size int) string {
	return writeTree(t, map[string]string{
		"k/kustomization.yaml": "configMapGenerator:\n- name: big\n  files: [data.txt]\n",
		"k/data.txt":           strings.Repeat("0123456789abcde\n", size/16),
	})
}

// TestRenderOutputBounded: four renders at once, each answering about 200 KiB, under a
// per-render output bound of 256 KiB all succeed, and the answer bytes the process holds
// decoded at once never pass four times the bound; a render answering 1 MiB fails,
// terminal, naming the limit and its flag. Before the bound a render could decode up to
// --max-total-size (256 MiB) of answer into the daemon: the 1 MiB render succeeded.
func TestRenderOutputBounded(t *testing.T) {
	const bound = 256 << 10
	opts := DefaultRenderOptions()
	opts.Isolate = true
	opts.Limits.MaxRenderOutput = bound
	answerBytesHeld.mu.Lock()
	answerBytesHeld.high = answerBytesHeld.n
	answerBytesHeld.mu.Unlock()

	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		dir := generatorTree(t, 200<<10)
		wg.Go(func() {
			objs, err := Render(t.Context(), dir, "k", opts)
			if err == nil && len(objs) != 1 {
				err = fmt.Errorf("%d objects, want 1", len(objs))
			}
			errs[i] = err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("renders under the bound: %v", err)
	}
	answerBytesHeld.mu.Lock()
	high, held := answerBytesHeld.high, answerBytesHeld.n
	answerBytesHeld.mu.Unlock()
	if high > 4*bound || high < 200<<10 {
		t.Errorf("answer bytes held at once: %d, want between one answer (%d) and four bounds (%d)", high, 200<<10, 4*bound)
	}
	if held != 0 {
		t.Errorf("answer bytes still held after the renders: %d", held)
	}

	objs, err := Render(t.Context(), generatorTree(t, 1<<20), "k", opts)
	if err == nil {
		t.Fatalf("Render returned %d objects and no error", len(objs))
	}
	want := "k: render output too large: render children answered more than 262144 bytes (raise the limit with --max-render-output)"
	if err.Error() != want || !errors.Is(err, ErrRenderOutput) || !IsTerminal(err) {
		t.Errorf("error:\n%v\nwant a terminal ErrRenderOutput:\n%s", err, want)
	}
}

// TestRenderSlotsBoundChildren: with two render slots, three renders whose children never
// answer run two children at once, not three; the third starts when one is stopped. With
// max(4, GOMAXPROCS) slots process-wide all three would run.
func TestRenderSlotsBoundChildren(t *testing.T) {
	opts := DefaultRenderOptions()
	opts.Isolate = true
	opts.Limits.RenderSlots = 2
	childrenRunning.mu.Lock()
	base := childrenRunning.n
	childrenRunning.high = base
	childrenRunning.mu.Unlock()
	running := func() (int64, int64) {
		childrenRunning.mu.Lock()
		defer childrenRunning.mu.Unlock()
		return childrenRunning.n - base, childrenRunning.high - base
	}

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 3)
	defer func() {
		cancel()
		for range 3 {
			<-done
		}
	}()
	for i := range 3 {
		dir := writeTree(t, map[string]string{
			"k/kustomization.yaml": "resources: [cm.yaml]\n", "k/cm.yaml": cm(fmt.Sprintf("c%d", i), "default"),
			"k/" + hangMarker: "",
		})
		go func() {
			_, err := Render(ctx, dir, "k", opts)
			done <- err
		}()
	}
	deadline := time.Now().Add(time.Minute)
	for n, _ := running(); n < 2; n, _ = running() {
		if time.Now().After(deadline) {
			t.Fatalf("%d render children started within a minute, want 2", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Leave the third render time to start a child it should not have.
	time.Sleep(time.Second)
	if _, high := running(); high != 2 {
		t.Errorf("render children at once: %d, want the 2 slots", high)
	}
	select {
	case err := <-done:
		t.Fatalf("a render returned while its child hangs: %v", err)
	default:
	}
}

// TestAnswerDecodeFactor measures the heap a decoded render takes per byte of its answer,
// for ConfigMap-heavy and Deployment-heavy sets, and checks it is within decodeFactor, the
// figure the memory model (docs/deploy.md, "Sizing") and DefaultMaxRenderOutput rely on.
func TestAnswerDecodeFactor(t *testing.T) {
	configMap := func(i int) string {
		return fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm-%d","namespace":"apps","labels":{"app":"a"}},"data":{"config.yaml":%q,"mode":"x"}}`,
			i, strings.Repeat("key: value\n", 90))
	}
	for _, set := range []struct {
		name string
		gen  func(int) string
	}{{"ConfigMaps", configMap}, {"Deployments", deploymentJSON}} {
		var answer strings.Builder
		for i := range 2000 {
			fmt.Fprintf(&answer, `{"r":%s}`+"\n", set.gen(i))
		}
		fmt.Fprintf(&answer, `{"end":{"read":0}}`+"\n")
		in := answer.String()
		b := newBudget("k", Limits{MaxRenderOutput: 1 << 30})
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		objs, _, err := readAnswer(&childproc.Reader{R: strings.NewReader(in), Max: 1 << 30}, "k/kustomization.yaml", b)
		runtime.GC()
		runtime.ReadMemStats(&after)
		counted := b.output.Load()
		b.release()
		if err != nil || len(objs) != 2000 {
			t.Fatalf("%s: %d objects, %v", set.name, len(objs), err)
		}
		factor := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(counted)
		runtime.KeepAlive(objs)
		runtime.KeepAlive(in) // its bytes were in the heap before: not freed by the decode
		t.Logf("%s: %d answer bytes counted, %.2f heap bytes per answer byte", set.name, counted, factor)
		if factor > decodeFactor {
			t.Errorf("%s: %.2f heap bytes per answer byte, over decodeFactor (%d)", set.name, factor, decodeFactor)
		}
	}
}

// deploymentJSON is a Deployment of a typical size (about 630 bytes of JSON).
func deploymentJSON(i int) string {
	return fmt.Sprintf(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d-%d","namespace":"apps","labels":{"app":"a","tier":"web"}},`+
		`"spec":{"replicas":2,"selector":{"matchLabels":{"app":"a"}},"template":{"metadata":{"labels":{"app":"a","tier":"web"}},`+
		`"spec":{"containers":[{"name":"web","image":"registry.example/web:1.2.3","args":["--port=8080","--verbose"],`+
		`"ports":[{"containerPort":8080,"name":"http"}],"env":[{"name":"A","value":"1"},{"name":"B","value":"two"}],`+
		`"resources":{"requests":{"cpu":"100m","memory":"64Mi"},"limits":{"memory":"128Mi"}},`+
		`"readinessProbe":{"httpGet":{"path":"/healthz","port":8080},"periodSeconds":5}}]}}}}`, i)
}

// TestPlainYAMLCountsAgainstRenderOutput: plain YAML is decoded in this process as a render
// child's answer is, so its documents count against --max-render-output too, and a folder
// of many small files under every per-file and total-size limit is refused naming the file
// where it passed the bound. Without it: such a folder was decoded whole (only
// --max-total-size, 256 MiB, bounded it).
func TestPlainYAMLCountsAgainstRenderOutput(t *testing.T) {
	files := map[string]string{}
	for i := range 40 {
		var doc strings.Builder
		fmt.Fprintf(&doc, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c%d\n  namespace: apps\ndata:\n", i)
		for k := range 100 {
			fmt.Fprintf(&doc, "  k%d: %s\n", k, strings.Repeat("v", 90))
		}
		files[fmt.Sprintf("app/c%02d.yaml", i)] = doc.String()
	}
	dir := writeTree(t, files) // 40 files of about 10 KiB
	opts := DefaultRenderOptions()
	opts.Workers = 1
	opts.Limits.MaxRenderOutput = 256 << 10
	objs, err := Render(t.Context(), dir, "app", opts)
	if err == nil {
		t.Fatalf("Render returned %d objects and no error", len(objs))
	}
	if !errors.Is(err, ErrRenderOutput) || !IsTerminal(err) || !strings.Contains(err.Error(), "(raise the limit with --max-render-output)") ||
		!strings.HasPrefix(err.Error(), "app/c") {
		t.Errorf("error: %v, want a terminal ErrRenderOutput naming a file of app/ and the flag", err)
	}
	opts.Limits.MaxRenderOutput = 1 << 20
	if objs, err := Render(t.Context(), dir, "app", opts); err != nil || len(objs) != 40 {
		t.Errorf("Render under the bound: %d objects, %v; want 40", len(objs), err)
	}
}
