package sources

import (
	"os"
	"testing"
)

// TestMain lets the test binary serve as a render child for isolated builds.
func TestMain(m *testing.M) {
	ServeChild()
	os.Exit(m.Run())
}
