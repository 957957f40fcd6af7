package git

import (
	"crypto/rand"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestFetchSizeBounded: a fetch reads at most MaxFetchSize bytes from the remote, over HTTP
// and SSH alike, and leaves no partial pack in the cache; the refusal is terminal and says
// which limit. Before, a remote could stream any amount into the daemon's git cache until
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
			if !errors.Is(err, ErrTooLarge) || !IsTerminal(err) || !strings.Contains(err.Error(), "more than 1048576 bytes received") {
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
