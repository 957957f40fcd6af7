package main

import (
	"os"
	"testing"

	"github.com/converge-dev/converge/sources"
)

// TestMain lets the test binary serve as a render child: a chart renders in one.
func TestMain(m *testing.M) {
	sources.ServeChild()
	os.Exit(m.Run())
}
