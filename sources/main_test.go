package sources

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// hangMarker is a file that, in a kustomization's folder, makes this test binary's render
// child never answer: a stand-in for a kustomize build that never returns, which the
// parent must stop at its context's end without holding up other renders.
const hangMarker = "converge-test-hang"

// TestMain lets the test binary serve as a render child for isolated builds.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(serveTestChild(os.Stdin, os.Stdout))
	}
	ServeChild()
	os.Exit(m.Run())
}

// serveTestChild is ServeChild's child, except that a build of a folder holding hangMarker
// blocks until the parent kills it. The seam lives here, in the test binary, so that no
// production binary can be made to hang by a file or a variable.
func serveTestChild(in io.Reader, out io.Writer) int {
	req, err := io.ReadAll(in)
	if err != nil {
		fmt.Fprintln(os.Stderr, "render child: read request:", err)
		return 2
	}
	var r childRequest
	if err := json.Unmarshal(req, &r); err == nil {
		if _, err := os.Stat(filepath.Join(r.Root, filepath.FromSlash(r.Unit), hangMarker)); err == nil {
			time.Sleep(time.Hour) // killed by the parent long before
			return 3
		}
	}
	os.Stdout = os.Stderr // as ServeChild: whatever a library prints must not corrupt the answer
	return serveChild(bytes.NewReader(req), out)
}
