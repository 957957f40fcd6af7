package oci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/converge-dev/converge/e2e/registry"
	"github.com/converge-dev/converge/sources/cachekey"
)

// tarGz builds a tar+gzip of raw headers; a regular file's content is size zeros when body
// is empty.
func tarGz(t *testing.T, entries ...tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	tw := tar.NewWriter(zw)
	for _, h := range entries {
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := io.CopyN(tw, zeros{}, h.Size); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestFetchFailures: each failure names the artifact and what to do, is classified, and
// leaves nothing in the cache.
func TestFetchFailures(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	reg.PushFiles(t, "app", "v1", map[string]string{"cm.yaml": "kind: ConfigMap\n"})
	tampered := registry.Tarball(t, map[string]string{"cm.yaml": "kind: ConfigMap\n# tampered\n"})
	reg.Push(t, "tampered", "v1", registry.Layer{MediaType: registry.FluxContentMediaType, Data: tampered})
	// The registry's copy changed in place, its length kept: only the digest tells.
	evil := bytes.Clone(tampered)
	evil[len(evil)/2] ^= 0xff
	if err := os.WriteFile(reg.BlobPath(digest.FromBytes(tampered)), evil, 0o600); err != nil {
		t.Fatal(err)
	}
	reg.Push(t, "climb", "v1", registry.Layer{MediaType: registry.FluxContentMediaType,
		Data: tarGz(t, tar.Header{Name: "ok.yaml", Typeflag: tar.TypeReg, Size: 3, Mode: 0o644}, tar.Header{Name: "a/../../etc/x", Typeflag: tar.TypeReg, Size: 3, Mode: 0o644})})
	reg.Push(t, "link", "v1", registry.Layer{MediaType: registry.FluxContentMediaType,
		Data: tarGz(t, tar.Header{Name: "sub/passwd", Typeflag: tar.TypeSymlink, Linkname: "../../etc/passwd", Mode: 0o777})})
	reg.Push(t, "bomb", "v1", registry.Layer{MediaType: registry.FluxContentMediaType,
		Data: tarGz(t, tar.Header{Name: "a.yaml", Typeflag: tar.TypeReg, Size: 4 << 20, Mode: 0o644}, tar.Header{Name: "b.yaml", Typeflag: tar.TypeReg, Size: 64 << 20, Mode: 0o644})})
	reg.Push(t, "device", "v1", registry.Layer{MediaType: registry.FluxContentMediaType,
		Data: tarGz(t, tar.Header{Name: "null", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3, Mode: 0o666})})

	small := localOptions()
	small.MaxTotalSize, small.MaxFileSize = 16<<20, 0
	tests := []struct {
		name     string
		a        Artifact
		opts     FetchOptions
		want     error
		msg      []string
		terminal bool
	}{
		{"tag not found", Artifact{URL: reg.URL("app"), Ref: Ref{Tag: "v9"}}, localOptions(), ErrNotFound, []string{reg.URL("app") + ":v9", "push it"}, false},
		{"repository not found", Artifact{URL: reg.URL("nothing"), Ref: Ref{Tag: "v1"}}, localOptions(), ErrNotFound, []string{reg.URL("nothing") + ":v1"}, false},
		{"bad semver", Artifact{URL: reg.URL("app"), Ref: Ref{SemVer: ">=1.x.y<"}}, localOptions(), ErrInvalid, []string{reg.URL("app"), "ref.semver"}, true},
		{"no semver match", Artifact{URL: reg.URL("app"), Ref: Ref{SemVer: ">=5"}}, localOptions(), ErrNotFound, []string{reg.URL("app"), ">=5"}, false},
		{"two refs", Artifact{URL: reg.URL("app"), Ref: Ref{Tag: "v1", SemVer: "1"}}, localOptions(), ErrInvalid, []string{"one of tag, semver and digest"}, true},
		{"no layer of the media type", Artifact{URL: reg.URL("app"), Ref: Ref{Tag: "v1"}, Layer: LayerSelector{MediaType: "application/x-nope"}}, localOptions(), ErrInvalid, []string{"application/x-nope", "layerSelector"}, true},
		{"tampered layer", Artifact{URL: reg.URL("tampered"), Ref: Ref{Tag: "v1"}}, localOptions(), ErrDigest, []string{reg.URL("tampered") + ":v1", "push the artifact again"}, true},
		{"name with ..", Artifact{URL: reg.URL("climb"), Ref: Ref{Tag: "v1"}}, localOptions(), ErrUnsafeEntry, []string{reg.URL("climb"), "a/../../etc/x"}, true},
		{"symlink out", Artifact{URL: reg.URL("link"), Ref: Ref{Tag: "v1"}}, localOptions(), ErrUnsafeEntry, []string{"sub/passwd", "leads out"}, true},
		{"device", Artifact{URL: reg.URL("device"), Ref: Ref{Tag: "v1"}}, localOptions(), ErrUnsafeEntry, []string{"null", "devices"}, true},
		{"gzip bomb", Artifact{URL: reg.URL("bomb"), Ref: Ref{Tag: "v1"}}, small, ErrTooLarge, []string{reg.URL("bomb"), "--max-total-size"}, true},
		{"loopback refused", Artifact{URL: reg.URL("app"), Ref: Ref{Tag: "v1"}}, DefaultFetchOptions(), ErrLocal, []string{reg.URL("app"), "loopback address refused"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.a.Insecure = true
			_, err := NewFetcher(dir).Fetch(t.Context(), tt.a, tt.opts)
			if !errors.Is(err, tt.want) {
				t.Fatalf("error %v, want %v", err, tt.want)
			}
			for _, m := range tt.msg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not name %q", err, m)
				}
			}
			if IsTerminal(err) != tt.terminal {
				t.Errorf("IsTerminal = %v, want %v", IsTerminal(err), tt.terminal)
			}
			left, _ := os.ReadDir(dir)
			left = slices.DeleteFunc(left, func(e os.DirEntry) bool { return e.Name() == cachekey.File })
			if len(left) != 0 {
				t.Errorf("the cache holds %d entries after a failed fetch, want none", len(left))
			}
		})
	}
}

// TestFetchBombStopsAsInflated: a file bigger than the total is refused from its header,
// before a byte of it is inflated or written, and the inflated stream itself is cut at its
// bound whatever the headers say.
func TestFetchBombStopsAsInflated(t *testing.T) {
	root, err := os.OpenRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	b := &inflateBound{r: zeros{}, left: 1 << 20, what: "oci://x/y:v1", limit: 1 << 20}
	n, err := io.Copy(io.Discard, b)
	if !errors.Is(err, ErrTooLarge) || n != 1<<20 {
		t.Fatalf("inflateBound read %d bytes, error %v; want 1 MiB then ErrTooLarge", n, err)
	}
	_, err = extract("oci://x/y:v1", bytes.NewReader(tarGz(t, tar.Header{Name: "big", Typeflag: tar.TypeReg, Size: 64 << 20, Mode: 0o644})), root, limits{totalSize: 1 << 20, files: 10})
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "--max-total-size") {
		t.Fatalf("extract of a 64 MiB file under a 1 MiB total: %v, want ErrTooLarge naming --max-total-size", err)
	}
	if info, err := root.Stat("big"); err == nil {
		t.Errorf("the refused file was written (%d bytes)", info.Size())
	}
}

// TestFetchTimeout: a registry that accepts connections and never answers fails the fetch
// at its timeout, naming the artifact.
func TestFetchTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	opts := localOptions()
	opts.Timeout = 2 * time.Second
	a := Artifact{URL: "oci://" + ln.Addr().String() + "/app", Ref: Ref{Tag: "v1"}, Insecure: true}
	done := make(chan error, 1)
	go func() {
		_, err := NewFetcher(t.TempDir()).Fetch(t.Context(), a, opts)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), a.String()) || !strings.Contains(err.Error(), "--fetch-timeout") {
			t.Fatalf("error %v, want a timeout naming %s and --fetch-timeout", err, a)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the fetch was still blocked 60 s after its 2 s timeout")
	}
}

// TestExtractCountsFolders: folders count against --max-files like files, so a layer of
// empty folders cannot spend the disk's inodes.
func TestExtractCountsFolders(t *testing.T) {
	root, err := os.OpenRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	var entries []tar.Header
	for i := range 50 {
		entries = append(entries, tar.Header{Name: strings.Repeat("d/", i+1), Typeflag: tar.TypeDir, Mode: 0o755})
	}
	_, err = extract("oci://x/y:v1", bytes.NewReader(tarGz(t, entries...)), root, limits{files: 10})
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "--max-files") {
		t.Fatalf("50 folders under --max-files 10: %v, want ErrTooLarge naming --max-files", err)
	}
}
