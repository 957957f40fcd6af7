package git

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// keyFile holds the random key that cache directory names are computed with.
const keyFile = "cache.key"

// cacheKey names the cache of one (URL, credentials) pair. Repositories and checkouts are
// never shared between credentials: what one Sync's secret fetched, a Sync with no secret
// or another one cannot read, not even by naming a commit that is already cached. Two Syncs
// with the same URL and credentials share one cache.
//
// The name is an HMAC under a random key kept in the cache directory, not a plain hash, so
// that a directory name seen in a log or an error cannot be used to guess a password.
func (f *Fetcher) cacheKey(repo Repository) (string, error) {
	key, err := f.secret()
	if err != nil {
		return "", err
	}
	mac := hmac.New(sha256.New, key)
	a := repo.Auth
	for _, field := range [][]byte{
		[]byte(repo.URL), []byte(a.Username), []byte(a.Password), []byte(a.BearerToken),
		a.SSHPrivateKey, a.SSHKnownHosts,
	} {
		// Length-prefixed, so that no two different field lists hash the same bytes.
		_ = binary.Write(mac, binary.BigEndian, uint64(len(field)))
		mac.Write(field)
	}
	return hex.EncodeToString(mac.Sum(nil)[:16]), nil
}

// secret returns the cache directory's key, creating it on first use. Several processes
// may share a cache directory (the CLI and a daemon): the first to link its key file in
// place wins and the others read it.
func (f *Fetcher) secret() ([]byte, error) {
	f.keyMu.Lock()
	defer f.keyMu.Unlock()
	if f.key != nil {
		return f.key, nil
	}
	path := filepath.Join(f.cacheDir, keyFile)
	key, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		key, err = createKey(f.cacheDir, path)
	}
	if err != nil {
		return nil, fmt.Errorf("git cache key: %w", err)
	}
	if len(key) != 32 {
		return nil, fmt.Errorf("git cache key %s: want 32 bytes, found %d (remove the file to start a new cache)", path, len(key))
	}
	f.key = key
	return key, nil
}

func createKey(dir, path string) ([]byte, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(dir, ".key-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	key := make([]byte, 32)
	_, _ = rand.Read(key) // never fails (crypto/rand)
	if _, err := tmp.Write(key); err != nil {
		_ = tmp.Close()
		return nil, err
	}
	if err := tmp.Close(); err != nil {
		return nil, err
	}
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	return os.ReadFile(path)
}
