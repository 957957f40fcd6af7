package sops

import (
	"os"
	"testing"

	"github.com/converge-dev/converge/e2e/sopsfixture"
)

// TestMain makes this test binary the decryption program Decrypt starts.
func TestMain(m *testing.M) {
	sopsfixture.ServeDecryption()
	os.Exit(m.Run())
}
