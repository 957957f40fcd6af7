package sources

import (
	"errors"
	"io/fs"
)

// errSymlinkEscape is ErrPathEscape through a symlink. Its message names neither the
// symlink's target nor any path of this machine: a target such as /proc/self/fd/N resolves
// to whatever file the daemon has open, another tenant's checkout among them.
var errSymlinkEscape = escapeError{}

type escapeError struct{}

func (escapeError) Error() string { return "symlink points outside the source" }
func (escapeError) Unwrap() error { return ErrPathEscape }

// symlinkEscape refuses the slash path p of the source, which leads outside it through a
// symlink.
func symlinkEscape(p string) error {
	return &InputError{File: p, Err: errSymlinkEscape}
}

// escapes reports whether err is os.Root refusing a path that leads outside the root. The
// root refuses such a symlink before looking at its target: whether the target exists is
// not observable.
func escapes(err error) bool {
	var pe *fs.PathError
	return errors.As(err, &pe) && pe.Err != nil && pe.Err.Error() == "path escapes from parent"
}
