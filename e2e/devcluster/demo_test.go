package main

import (
	"testing"
)

// TestDemoGitKeepsItsAddress checks that the demo's git server comes back on the address it
// had, so Syncs created against it keep fetching after the next make run, and moves to a new
// address, recorded, when that one is taken.
func TestDemoGitKeepsItsAddress(t *testing.T) {
	dir, root := t.TempDir(), t.TempDir()
	first, err := startGit(dir, root)
	if err != nil {
		t.Fatal(err)
	}
	url := first.URL
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := startGit(dir, root)
	if err != nil {
		t.Fatal(err)
	}
	if again.URL != url {
		t.Errorf("the git server came back on %s, want %s", again.URL, url)
	}
	// While it runs, its address is taken: a third server moves, and the move is recorded.
	moved, err := startGit(dir, root)
	if err != nil {
		t.Fatal(err)
	}
	defer moved.Close()
	defer again.Close()
	if moved.URL == url {
		t.Fatalf("a second server got the address in use, %s", url)
	}
	if err := moved.Close(); err != nil {
		t.Fatal(err)
	}
	last, err := startGit(dir, root)
	if err != nil {
		t.Fatal(err)
	}
	defer last.Close()
	if last.URL != moved.URL {
		t.Errorf("after a move the git server came back on %s, want the recorded %s", last.URL, moved.URL)
	}
}
