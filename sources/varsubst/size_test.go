package varsubst

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/converge-dev/converge/sources"
)

// TestExpandOutputBounded: an 18 KB object naming a 100 KiB variable 3,000 times would
// substitute to 300 MB. It is refused, terminal, naming the object and the limit, and the
// expansion allocates about the object's bound, not its expansion.
func TestExpandOutputBounded(t *testing.T) {
	b := load(t, map[string]string{"app.yaml": fmt.Sprintf(cm, "big: \""+strings.Repeat("${big}", 3_000)+"\"")})
	vars := merge(t, Source{Name: "spec.postBuild.substitute", Values: map[string]string{"big": strings.Repeat("x", 100<<10)}})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	out, err := Expand(b, vars, Options{})
	runtime.ReadMemStats(&after)
	if err == nil {
		t.Fatalf("Expand returned %d objects and no error", len(out.Objects))
	}
	want := "app.yaml:1: ConfigMap apps/app: substitution makes the object larger than 8388608 bytes (raise the limit with --max-file-size)"
	var input *sources.InputError
	if err.Error() != want || !errors.As(err, &input) {
		t.Errorf("error:\n%v\nwant a terminal error:\n%s", err, want)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 96<<20 {
		t.Errorf("Expand allocated %d MiB", alloc>>20)
	}
}
