package main

import (
	"os"

	"golang.org/x/term"
)

// isTerminal reports whether stream (stdin, stdout) is a terminal, not a pipe, a file or
// /dev/null: prompts and colour are for people, not for logs.
func isTerminal(stream any) bool {
	f, ok := stream.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
