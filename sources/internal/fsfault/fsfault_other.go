//go:build !linux

package fsfault

import "testing"

// Undeletable skips the test: marking a file immutable is done on Linux only.
func Undeletable(t testing.TB, root, path string) {
	t.Helper()
	t.Skipf("cannot make %s immutable on this system: the part-way removal this test needs is out of reach", path)
}

// Release does nothing: no file was marked.
func Release(root string) error { return nil }
