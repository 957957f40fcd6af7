// Package cachekey names the entries of a source cache that must never be shared between
// credentials: an entry's name is an HMAC of what identifies it (a URL, the credentials)
// under a random key kept in the cache directory, not a plain hash, so that a name seen in
// a log or an error cannot be used to guess a password.
package cachekey

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
	"sync"
)

// File holds the random key that entry names are computed with.
const File = "cache.key"

// Keyer names the entries of one cache directory.
type Keyer struct {
	dir string
	mu  sync.Mutex
	key []byte // read from dir on first use
}

// New returns the Keyer of cache directory dir.
func New(dir string) *Keyer { return &Keyer{dir: dir} }

// Name returns the entry name of fields (length-prefixed, so that no two different field
// lists hash the same bytes).
func (k *Keyer) Name(fields ...[]byte) (string, error) {
	key, err := k.secret()
	if err != nil {
		return "", err
	}
	mac := hmac.New(sha256.New, key)
	for _, field := range fields {
		_ = binary.Write(mac, binary.BigEndian, uint64(len(field)))
		mac.Write(field)
	}
	return hex.EncodeToString(mac.Sum(nil)[:16]), nil
}

// secret returns the cache directory's key, creating it on first use. Several processes
// may share a cache directory (the CLI and a daemon): the first to link its key file in
// place wins and the others read it.
func (k *Keyer) secret() ([]byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.key != nil {
		return k.key, nil
	}
	path := filepath.Join(k.dir, File)
	key, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		key, err = create(k.dir, path)
	}
	if err != nil {
		return nil, fmt.Errorf("cache key: %w", err)
	}
	if len(key) != 32 {
		return nil, fmt.Errorf("cache key %s: want 32 bytes, found %d (remove the file to start a new cache)", path, len(key))
	}
	k.key = key
	return key, nil
}

func create(dir, path string) ([]byte, error) {
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
