package git

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
)

// A fetch's remote is tenant input: it could stream an endless pack into the git cache
// until the fetch times out. Each fetch therefore has a byte budget (FetchOptions
// MaxFetchSize) that every byte read from the remote counts against: an HTTP answer's body
// (in policyTransport, per request, so a kept-alive connection is counted for the fetch
// that reads it) and an SSH connection (in the guarded dialer; one connection per session).

// fetchBudget is what one fetch may still read from the network.
type fetchBudget struct {
	max  int64
	what string // what was too large, for the error
	left atomic.Int64
}

func newFetchBudget(max int64, what string) *fetchBudget {
	if max <= 0 {
		return nil
	}
	b := &fetchBudget{max: max, what: what}
	b.left.Store(max)
	return b
}

// take counts n bytes read; the read that goes past the budget fails.
func (b *fetchBudget) take(n int) error {
	if b == nil || n <= 0 {
		return nil
	}
	if b.left.Add(-int64(n)) < 0 {
		return b.err()
	}
	return nil
}

// exceeded reports whether a read went past the budget. go-git does not keep the reader's
// error in its chain, so Fetch asks the budget.
func (b *fetchBudget) exceeded() bool { return b != nil && b.left.Load() < 0 }

func (b *fetchBudget) err() error {
	return fmt.Errorf("%w: %s: more than %d bytes", ErrTooLarge, b.what, b.max)
}

// maxAdvertisement bounds one HTTP ref advertisement (GET …/info/refs), which go-git holds
// in memory whole: far above a repository with 100,000 refs (about 7 MiB), far below what
// would exhaust the daemon. An SSH advertisement is bounded only by MaxFetchSize: it
// arrives on the session's stream, which the guard sees encrypted.
const maxAdvertisement = 32 << 20

// budgetReader counts what r reads against b.
type budgetReader struct {
	r io.Reader
	b *fetchBudget
}

func (c budgetReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if e := c.b.take(n); e != nil {
		return n, e
	}
	return n, err
}

// budgetConn is an SSH connection counted against a fetch's budget.
type budgetConn struct {
	net.Conn
	b *fetchBudget
}

func (c budgetConn) Read(p []byte) (int, error) {
	return budgetReader{c.Conn, c.b}.Read(p)
}

// sshPolicies carries each SSH fetch's policy to the dialer go-git calls without a
// context: the proxy URL names the fetch by a random token (see dialPolicy.proxyOptions).
var sshPolicies sync.Map // token → dialPolicy

// registerSSH makes p reachable from the SSH dialer under a new token until release.
func registerSSH(p dialPolicy) (token string, release func()) {
	var raw [16]byte
	_, _ = rand.Read(raw[:])
	token = hex.EncodeToString(raw[:])
	sshPolicies.Store(token, p)
	return token, func() { sshPolicies.Delete(token) }
}

// sshPolicy returns the policy registered under token: the strict one, without a budget,
// for any other token.
func sshPolicy(token string) dialPolicy {
	p, _ := sshPolicies.Load(token)
	pol, _ := p.(dialPolicy)
	return pol
}

// removePartialPacks deletes the temporary packs an interrupted fetch leaves in a cache
// repository (go-git removes them only when the stream ended cleanly).
func removePartialPacks(repoDir string) {
	tmp, _ := filepath.Glob(filepath.Join(repoDir, "objects", "pack", "tmp_*"))
	for _, p := range tmp {
		_ = os.Remove(p)
	}
}
