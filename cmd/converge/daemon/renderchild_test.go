package daemon

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/converge-dev/converge/sources"
)

// hangMarker is a file that, in a kustomization's folder, makes this test binary's render
// child never answer: a stand-in for a kustomize build that never returns.
const hangMarker = "converge-test-hang"

// serveRenderChild is sources.ServeChild, except that as a render child it blocks (until
// the daemon kills it) on a build of a folder holding hangMarker. The seam lives in the
// test binary, so no production binary can be made to hang by a file.
func serveRenderChild() {
	if os.Getenv("CONVERGE_RENDER_CHILD") != "1" { // sources.childEnv
		sources.ServeChild()
		return
	}
	req, err := io.ReadAll(os.Stdin)
	if err != nil {
		os.Exit(2)
	}
	var r struct {
		Root string `json:"root"`
		Unit string `json:"unit"`
	}
	if json.Unmarshal(req, &r) == nil {
		if _, err := os.Stat(filepath.Join(r.Root, filepath.FromSlash(r.Unit), hangMarker)); err == nil {
			time.Sleep(time.Hour) // killed by the daemon long before
			os.Exit(3)
		}
	}
	// Hand the request on to the real child.
	pr, pw, err := os.Pipe()
	if err != nil {
		os.Exit(2)
	}
	go func() {
		_, _ = pw.Write(req)
		_ = pw.Close()
	}()
	os.Stdin = pr
	sources.ServeChild()
}
