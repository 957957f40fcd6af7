//go:build linux

// Package fsfault makes file system faults for tests of the source caches: a file that no
// one, root included, can remove, so that removing the folder that holds it stops part-way
// exactly as a process killed in the middle of that removal would leave it. Linux only:
// elsewhere its tests are skipped.
package fsfault

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// fsImmutable is FS_IMMUTABLE_FL (linux/fs.h): the file cannot be removed, renamed,
// linked to or written, even by root.
const fsImmutable = 0x10

// Undeletable marks file or folder path, under folder root, immutable (a folder cannot be
// renamed then). Release(root) takes the mark
// off again, wherever under root the file has moved meanwhile, and runs when the test ends.
// The test is skipped where the file system or the process cannot mark a file (chattr +i
// needs CAP_LINUX_IMMUTABLE and a file system with inode flags: ext4, xfs, btrfs).
func Undeletable(t testing.TB, root, path string) {
	t.Helper()
	if err := setFlag(path, true); err != nil {
		t.Skipf("cannot make %s immutable here (%v): the part-way removal this test needs is out of reach", path, err)
	}
	t.Cleanup(func() {
		if err := Release(root); err != nil {
			t.Errorf("take the immutable marks off under %s: %v", root, err)
		}
	})
}

// Release takes the immutable mark off every regular file and folder under root.
func Release(root string) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !(d.Type().IsRegular() || d.IsDir()) {
			return nil
		}
		return setFlag(path, false)
	})
}

func setFlag(path string, on bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	flags, err := unix.IoctlGetInt(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if err != nil {
		return err
	}
	if on == (flags&fsImmutable != 0) {
		return nil
	}
	if on {
		flags |= fsImmutable
	} else {
		flags &^= fsImmutable
	}
	return unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, flags)
}
