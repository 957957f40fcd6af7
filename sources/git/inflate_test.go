package git

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestFetchLargeBlobNotInflated: a small pack holding a large blob of zeros (256 MiB,
// compressed to a few hundred KiB) is refused with an error naming the per-file limit, and
// the fetch allocates far less than the blob: it is never inflated into memory.
func TestFetchLargeBlobNotInflated(t *testing.T) {
	const blobSize = 256 << 20
	r := newTestRepo(t)
	r.commit("small", map[string]string{"v.txt": "one"})
	f, err := os.Create(filepath.Join(r.work, "zeros.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(blobSize); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	r.commit("zeros", nil)
	r.push()
	url, _ := serveHTTP(t, r.root, nil)

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err = NewFetcher(t.TempDir()).Fetch(ctx, Repository{URL: url, Ref: Ref{Branch: "main"}}, loopbackOptions())
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("fetch allocated %d MiB; error: %v", allocated>>20, err)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "blob of 268435456 bytes") ||
		!strings.Contains(err.Error(), "limit of 8388608") {
		t.Errorf("Fetch error %v, want ErrTooLarge naming the blob size and the per-file limit", err)
	}
	if allocated > 64<<20 {
		t.Errorf("the fetch allocated %d MiB for a %d MiB blob: it was inflated in memory", allocated>>20, blobSize>>20)
	}
}
