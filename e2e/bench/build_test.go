package main

import (
	"context"
	"debug/elf"
	"testing"
)

// TestBuildConvergeIsStatic builds the daemon the benchmark measures and requires the
// image's kind of binary: static, with no dynamic symbol table. A cgo build (the default
// where a C compiler is installed) links "plugin" (kustomize imports it) in dynamic mode:
// every symbol exported and every exported method kept, tens of MB of file pages in the
// daemon's RSS that the shipped binary does not have.
func TestBuildConvergeIsStatic(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/converge")
	}
	path, err := buildConverge(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("%s has a %s program header: a dynamically linked build, not the image's static one", path, p.Type)
		}
	}
	if s := f.Section(".dynsym"); s != nil {
		t.Errorf("%s has a dynamic symbol table of %d bytes", path, s.Size)
	}
}
