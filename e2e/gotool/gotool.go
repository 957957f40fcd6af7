// Package gotool gives tests a program built from the Go module proxy, once per version,
// cached in $CONVERGE_CACHE (default ~/.cache/converge)/<name>/<version>/<name>, as
// e2e/tools/build.sh caches the control plane. A test that compares against a real tool
// (helm, cosign) calls Binary: when the tool cannot be had the test is skipped, but under
// CI it fails, as the comparison is required there.
package gotool

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Binary returns the program pkg (a main package path) at version, building it with
// `go install` into the cache when it is not there yet. Test binaries of several packages
// may ask at once: one builds, the others wait for it.
func Binary(t testing.TB, name, pkg, version string) string {
	t.Helper()
	dir := filepath.Join(cacheDir(t), name, version)
	bin := filepath.Join(dir, name)
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		Unavailable(t, "%s cache: %v", name, err)
	}
	unlock := lock(t, dir)
	defer unlock()
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

// cacheDir is $CONVERGE_CACHE, else ~/.cache/converge.
func cacheDir(t testing.TB) string {
	t.Helper()
	if cache := os.Getenv("CONVERGE_CACHE"); cache != "" {
		return cache
	}
	home, err := os.UserHomeDir()
	if err != nil {
		Unavailable(t, "no cache folder: %v", err)
	}
	return filepath.Join(home, ".cache", "converge")
}

// lock takes dir's build lock, waiting for another process that holds it; the returned
// function releases it.
func lock(t testing.TB, dir string) (unlock func()) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		Unavailable(t, "cache lock: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		Unavailable(t, "cache lock: %v", err)
	}
	return func() { _ = f.Close() }
}

// Unavailable skips t, or fails it under CI, for a tool that cannot be had.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format+" (required when CI is set)", args...)
}

// ModuleBinary returns the program of the main package at dir ("." for the module's root) of
// module at version, built into the cache as Binary builds, and the folder of the module's
// source as the module proxy gave it (read-only: a test takes files from it, such as CRDs).
// Unlike `go install`, it builds a module whose go.mod replaces a module by a local folder
// the proxy does not ship (Flux's controllers and their api modules): the replacement is
// dropped and the module required at the version the go.mod names.
func ModuleBinary(t testing.TB, name, module, version, dir string) (bin, src string) {
	t.Helper()
	src = download(t, module, version)
	cache := cacheDir(t)
	out := filepath.Join(cache, name, version)
	bin = filepath.Join(out, name)
	if _, err := os.Stat(bin); err == nil {
		return bin, src
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		Unavailable(t, "%s cache: %v", name, err)
	}
	unlock := lock(t, out)
	defer unlock()
	if _, err := os.Stat(bin); err == nil {
		return bin, src
	}
	t.Logf("building %s %s from the module proxy into %s", name, version, out)
	work := filepath.Join(out, "src")
	_ = os.RemoveAll(work)
	if err := os.CopyFS(work, os.DirFS(src)); err != nil {
		Unavailable(t, "copy %s: %v", module, err)
	}
	defer func() { _ = os.RemoveAll(work) }()
	var mod struct {
		Replace []struct{ Old, New struct{ Path string } }
	}
	if err := json.Unmarshal(goCmd(t, work, "mod", "edit", "-json"), &mod); err != nil {
		Unavailable(t, "%s go.mod: %v", module, err)
	}
	for _, r := range mod.Replace {
		if strings.HasPrefix(r.New.Path, "./") || strings.HasPrefix(r.New.Path, "../") {
			goCmd(t, work, "mod", "edit", "-dropreplace="+r.Old.Path)
		}
	}
	goCmd(t, work, "build", "-mod=mod", "-trimpath", "-o", bin+".tmp", "./"+strings.TrimPrefix(dir, "./"))
	if err := os.Rename(bin+".tmp", bin); err != nil {
		Unavailable(t, "%s cache: %v", name, err)
	}
	return bin, src
}

// download fetches module at version from the module proxy and returns its folder.
func download(t testing.TB, module, version string) string {
	t.Helper()
	var d struct{ Dir, Error string }
	if err := json.Unmarshal(goCmd(t, t.TempDir(), "mod", "download", "-json", module+"@"+version), &d); err != nil || d.Dir == "" {
		Unavailable(t, "download %s@%s: %v %s", module, version, err, d.Error)
	}
	return d.Dir
}

// goCmd runs the go command in dir, as a build from the module proxy: no -mod flag of the
// caller's, no cgo, this toolchain. It returns the standard output.
func goCmd(t testing.TB, dir string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "CGO_ENABLED=0", "GOTOOLCHAIN=local")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		Unavailable(t, "go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}
