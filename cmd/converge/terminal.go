package main

import (
	"io"
	"os"

	"golang.org/x/term"
)

// isTerminal reports whether stream (stdin, stdout) is a terminal, not a pipe, a file or
// /dev/null: prompts and colour are for people, not for logs.
func isTerminal(stream any) bool {
	if w, ok := stream.(interface{ Unwrap() io.Writer }); ok { // a filter such as redactingWriter
		return isTerminal(w.Unwrap())
	}
	f, ok := stream.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
