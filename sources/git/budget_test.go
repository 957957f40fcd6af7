package git

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// TestFetchSizeBounded: a fetch reads at most MaxFetchSize bytes from the remote, over HTTP
// and SSH alike, and leaves no partial pack in the cache; the refusal is terminal and says
// which limit. Without it, a remote could stream any amount into the daemon's git cache until
// the fetch timed out.
func TestFetchSizeBounded(t *testing.T) {
	r := newTestRepo(t)
	big := make([]byte, 3<<20) // random: git cannot compress it below the limit
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	r.commit("big", map[string]string{"a.yaml": "a\n", "blob.bin": string(big)})
	r.push()
	httpURL, _ := serveHTTP(t, r.root, nil)
	srv := serveSSH(t, r.root)
	sshAuth := Auth{SSHPrivateKey: srv.clientKey, SSHKnownHosts: srv.knownHosts}
	for _, tt := range []struct {
		name string
		repo Repository
	}{
		{"http", Repository{URL: httpURL, Ref: Ref{Branch: "main"}}},
		{"ssh", Repository{URL: "ssh://git@" + srv.addr + "/repo.git", Ref: Ref{Branch: "main"}, Auth: sshAuth}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cache := t.TempDir()
			opts := loopbackOptions()
			opts.MaxFetchSize = 1 << 20
			_, err := NewFetcher(cache).Fetch(t.Context(), tt.repo, opts)
			if !errors.Is(err, ErrTooLarge) || !IsTerminal(err) || !strings.Contains(err.Error(), "received from the remote (--max-fetch-size): more than 1048576 bytes") {
				t.Fatalf("Fetch = %v; want a terminal ErrTooLarge naming the 1048576-byte limit", err)
			}
			_ = filepath.WalkDir(cache, func(p string, d fs.DirEntry, err error) error {
				if err == nil && strings.HasPrefix(d.Name(), "tmp_") {
					t.Errorf("partial pack left in the cache: %s", p)
				}
				return nil
			})
			opts.MaxFetchSize = 8 << 20
			if _, err := NewFetcher(cache).Fetch(t.Context(), tt.repo, opts); err != nil {
				t.Fatalf("Fetch under a larger limit, same cache: %v", err)
			}
		})
	}
}

// TestFetchAdvertisementBounded: an HTTP ref advertisement, which go-git reads into memory
// whole, is cut at maxAdvertisement whatever MaxFetchSize allows. Without it, a remote listing
// millions of refs drove the daemon's heap past its memory limit (3 million
// refs, 1 GiB of heap).
func TestFetchAdvertisementBounded(t *testing.T) {
	var sent atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/info/refs") {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/x-git-upload-pack-advertisement")
		_, _ = io.WriteString(w, "001e# service=git-upload-pack\n0000")
		for i := 0; sent.Load() < maxAdvertisement+(8<<20); i++ {
			line := fmt.Sprintf("1%039x refs/heads/b%d\n", i, i)
			if i == 0 {
				line = fmt.Sprintf("1%039x refs/heads/b0\x00ofs-delta\n", i)
			}
			n, err := fmt.Fprintf(w, "%04x%s", len(line)+4, line)
			if err != nil {
				return // the client hung up
			}
			sent.Add(int64(n))
		}
		_, _ = io.WriteString(w, "0000")
	}))
	t.Cleanup(srv.Close)
	opts := loopbackOptions()
	opts.MaxFetchSize = 0 // no overall limit: the advertisement's own must hold
	_, err := NewFetcher(t.TempDir()).Fetch(t.Context(), Repository{URL: srv.URL + "/repo.git", Ref: Ref{Branch: "main"}}, opts)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "ref advertisement") {
		t.Fatalf("Fetch = %v; want ErrTooLarge naming the ref advertisement", err)
	}
}
