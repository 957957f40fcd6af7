// Package gotool gives tests a program built from the Go module proxy, once per version,
// cached in $CONVERGE_CACHE (default ~/.cache/converge)/<name>/<version>/<name>, as
// e2e/tools/build.sh caches the control plane. A test that compares against a real tool
// (helm, cosign) calls Binary: when the tool cannot be had the test is skipped, but under
// CI it fails, as the comparison is required there.
package gotool

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// Binary returns the program pkg (a main package path) at version, building it with
// `go install` into the cache when it is not there yet. Test binaries of several packages
// may ask at once: one builds, the others wait for it.
func Binary(t testing.TB, name, pkg, version string) string {
	t.Helper()
	cache := os.Getenv("CONVERGE_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			Unavailable(t, "no cache folder: %v", err)
		}
		cache = filepath.Join(home, ".cache", "converge")
	}
	dir := filepath.Join(cache, name, version)
	bin := filepath.Join(dir, name)
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		Unavailable(t, "%s cache: %v", name, err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		Unavailable(t, "%s cache lock: %v", name, err)
	}
	defer func() { _ = lock.Close() }()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		Unavailable(t, "%s cache lock: %v", name, err)
	}
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	t.Logf("building %s %s from the module proxy into %s", name, version, dir)
	tmp := filepath.Join(dir, "tmp")
	cmd := exec.Command("go", "install", "-trimpath", pkg+"@"+version)
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=", "CGO_ENABLED=0", "GOTOOLCHAIN=local")
	if out, err := cmd.CombinedOutput(); err != nil {
		Unavailable(t, "build %s %s: %v\n%s", name, version, err, out)
	}
	if err := os.Rename(filepath.Join(tmp, name), bin); err != nil {
		Unavailable(t, "%s cache: %v", name, err)
	}
	return bin
}

// Unavailable skips t, or fails it under CI, for a tool that cannot be had.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format+" (required when CI is set)", args...)
}
