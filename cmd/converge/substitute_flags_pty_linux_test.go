//go:build linux

package main

import "testing"

// TestRedactingWriterKeepsTerminal: apply's output filter for Secret values does not hide
// the terminal behind it, so a person still gets colour. Without Unwrap, isTerminal saw
// the filter, not the terminal, and colour went off whenever --substitute-from-file was given.
func TestRedactingWriterKeepsTerminal(t *testing.T) {
	master, slave := openPTY(t)
	defer master.Close()
	defer slave.Close()
	if !isTerminal(&redactingWriter{out: slave, f: &substituteFlags{}}) {
		t.Error("isTerminal is false for a terminal behind the redacting writer")
	}
	if isTerminal(&redactingWriter{f: &substituteFlags{}}) {
		t.Error("isTerminal is true for a redacting writer with no stream")
	}
}
