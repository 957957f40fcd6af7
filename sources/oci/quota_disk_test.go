package oci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/converge-dev/converge/e2e/registry"
)

// diskUsage returns the blocks and inodes under dir.
func diskUsage(dir string) (blocks int64, inodes int) {
	_ = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil {
			inodes++
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				blocks += st.Blocks * 512
			}
		}
		return nil
	})
	return
}

// TestFetchCacheQuotaCountsDisk: an artifact's folders, empty files and symlinks count
// against --oci-cache-quota as the disk blocks they take: an artifact of 2,000 empty
// folders (8 MB of blocks) is refused under a 1 MiB quota and the cache stays under it.
// Without it: it counted 0 bytes, nothing was ever evicted, and five such artifacts
// took 41 MB and 10,011 inodes.
func TestFetchCacheQuotaCountsDisk(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	const artifacts, dirs = 5, 2000
	for i := range artifacts {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		tw := tar.NewWriter(zw)
		for j := range dirs {
			tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("d%05d/", j), Typeflag: tar.TypeDir, Mode: 0o755})
		}
		tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("v%d", i), Typeflag: tar.TypeReg, Mode: 0o644})
		tw.Close()
		zw.Close()
		reg.Push(t, "app", fmt.Sprintf("t%d", i), registry.Layer{MediaType: FluxContentMediaType, Data: buf.Bytes()})
	}
	cacheDir := t.TempDir()
	f := NewFetcher(cacheDir)
	opts := localOptions()
	opts.CacheQuota = 1 << 20 // 1 MiB
	for i := range artifacts {
		_, err := f.Fetch(t.Context(), Artifact{URL: reg.URL("app"), Ref: Ref{Tag: fmt.Sprintf("t%d", i)}, Insecure: true}, opts)
		if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "--oci-cache-quota") {
			t.Fatalf("fetch of 2,000 folders under a 1 MiB quota: %v, want ErrTooLarge naming --oci-cache-quota", err)
		}
	}
	if blocks, inodes := diskUsage(cacheDir); blocks > opts.CacheQuota {
		t.Errorf("the OCI cache uses %d bytes of disk (%d inodes), over its quota of %d", blocks, inodes, opts.CacheQuota)
	}
}
