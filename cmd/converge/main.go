// Command converge is a GitOps apply engine for Kubernetes: a daemon that keeps a cluster
// equal to a git path, and a CLI that renders, diffs and applies the same way.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/converge-dev/converge/sources"
)

func main() {
	// First: a render child (an isolated kustomize build) must run nothing else.
	sources.ServeChild()
	if err := newRootCommand().Execute(); err != nil {
		if !errors.Is(err, errChangesFound) {
			fmt.Fprintln(os.Stderr, "Error:", err)
		}
		os.Exit(exitCode(err))
	}
}
