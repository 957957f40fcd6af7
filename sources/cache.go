package sources

import (
	"bytes"
	"compress/flate"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// renderCache remembers the last renders by (source digest, path, options). It keeps
// successes and terminal errors: the same content renders the same way. It keeps each
// object as JSON, not decoded: a decoded object is maps of map[string]any about five times
// its JSON (a Deployment of 14 maps, 5.5 KB from 500 bytes), and a daemon keeps the render of
// every Sync between its reconciles (at 10,000 objects, 24 MB of decoded maps against 5 MB of
// JSON). Each load decodes its own objects from that JSON (about 10 ms per 1,000 objects), and
// drops them when its reconcile is done. What must tell two loads of one render apart from two
// renders compares Bundle.Key, not the objects.
//
// A render loaded for an owner (LoadOptions.Owner: a Sync) is kept while it is the last
// render of some owner: when an owner loads another render (a new commit), the one it
// leaves is dropped at once unless another owner's last load is that render. A daemon
// whose big Sync moved to a new commit otherwise kept the old render until newer ones had
// pushed it out. Renders loaded without an owner are dropped by age only.
//
// The cache also holds at most maxBytes of renders (their JSON, origins and ordered
// documents): past it, the least recently used renders are dropped, and a render larger
// than the whole bound is not kept.
type renderCache struct {
	mu       sync.Mutex
	max      int
	maxBytes int64
	bytes    int64    // the sizes of entries
	order    []string // most recently used first
	entries  map[string]cacheEntry
	owners   map[string]string // owner → key of its last load
	refs     map[string]int    // key → owners whose last load it is
	renders  int               // renders kept so far, for tests
}

type cacheEntry struct {
	// docs are the objects' JSON one after the other, compressed as one stream (flate,
	// fastest: a render's objects repeat their field names and most values); ends[i] is
	// where object i's JSON ends in the stream once inflated.
	docs    []byte
	ends    []int
	origins []string
	ordered [][]byte
	err     error
	size    int64 // heap bytes, set by put
}

// DefaultRenderCacheBytes bounds the renders a Loader keeps by the heap they take (their
// objects' JSON, compressed): with two render children (128 MiB) and four renders in flight at
// --max-render-output (224 MiB at most), it leaves about 100 MiB of the shipped 512 MiB to
// the binary and its other caches (docs/deploy.md, "Sizing").
const DefaultRenderCacheBytes = 56 << 20

func newRenderCache(size int, maxBytes int64) *renderCache {
	return &renderCache{max: size, maxBytes: maxBytes, entries: map[string]cacheEntry{}, owners: map[string]string{}, refs: map[string]int{}}
}

func cacheKey(digest, path string, opts RenderOptions) string {
	// Workers does not change the output, so it is not part of the key. Isolate refuses
	// URLs in fields that an in-process build would fetch.
	l := opts.Limits.withDefaults()
	return fmt.Sprintf("%s\x00%s\x00remote=%t\x00isolate=%t\x00limits=%d/%d/%d/%d/%d\x00ignored=%q\x00helm=%s\x00overlay=%s", digest, filepath.Clean(path), opts.AllowRemoteBases, opts.Isolate,
		l.MaxFiles, l.MaxFileSize, l.MaxObjects, l.MaxTotalSize, l.MaxRenderOutput, opts.Ignored, helmKey(opts.Helm), overlayKey(opts.Overlay))
}

// renderKey is the Bundle.Key of the render of cache key key.
func renderKey(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])
}

func (c *renderCache) get(key string) (cacheEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok {
		return cacheEntry{}, false
	}
	c.touch(key)
	return e, true
}

// put keeps objs as the render of key, with e's origins, ordered documents and error, and
// returns what it keeps; ok is false when it keeps nothing (the render alone exceeds the
// bound). Objects are written without HTML escaping: a tenant's "<" costs one byte, not six.
func (c *renderCache) put(key string, objs []*unstructured.Unstructured, e cacheEntry) (kept cacheEntry, ok bool) {
	if c.maxBytes < 0 { // keeps nothing: not worth writing
		return cacheEntry{}, false
	}
	var err error
	if e.docs, e.ends, err = compressObjects(objs); err != nil { // decoded from JSON: cannot fail; if it did, nothing is kept
		return cacheEntry{}, false
	}
	e.size = entrySize(e)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.drop(key)
	if e.size > c.maxBytes {
		return cacheEntry{}, false
	}
	c.entries[key] = e
	c.bytes += e.size
	c.renders++
	c.touch(key)
	for len(c.order) > c.max || c.bytes > c.maxBytes {
		c.drop(c.order[len(c.order)-1])
	}
	return e, true
}

// flateWriters holds compressors for compressObjects: a flate.Writer is about 1 MB of
// tables whatever it compresses, and a daemon compresses one render per Sync it reconciles.
var flateWriters = sync.Pool{New: func() any {
	zw, err := flate.NewWriter(nil, flate.BestSpeed)
	if err != nil { // only for an invalid level
		panic(err)
	}
	return zw
}}

// compressObjects writes objs as JSON (without HTML escaping: a tenant's "<" costs one
// byte, not six), one after the other, into one compressed stream, and says where each
// ends.
func compressObjects(objs []*unstructured.Unstructured) ([]byte, []int, error) {
	var out bytes.Buffer
	zw := flateWriters.Get().(*flate.Writer)
	zw.Reset(&out)
	defer func() { zw.Reset(io.Discard); flateWriters.Put(zw) }() // keeps no reference to out
	enc := newDocEncoder()
	ends := make([]int, len(objs))
	n := 0
	for i, o := range objs {
		doc, err := enc.encode(o)
		if err != nil {
			return nil, nil, err
		}
		if _, err := zw.Write(doc); err != nil {
			return nil, nil, err
		}
		n += len(doc)
		ends[i] = n
	}
	if err := zw.Close(); err != nil {
		return nil, nil, err
	}
	return bytes.Clone(out.Bytes()), ends, nil
}

// documents inflates e's objects' JSON: one document per object, slices of one buffer.
func (e cacheEntry) documents() ([][]byte, error) {
	if len(e.ends) == 0 {
		return nil, nil
	}
	raw := make([]byte, e.ends[len(e.ends)-1])
	if _, err := io.ReadFull(flate.NewReader(bytes.NewReader(e.docs)), raw); err != nil {
		return nil, err
	}
	docs := make([][]byte, len(e.ends))
	start := 0
	for i, end := range e.ends {
		docs[i], start = raw[start:end:end], end
	}
	return docs, nil
}

// objects decodes e's objects: new maps, the caller's own.
func (e cacheEntry) objects() ([]*unstructured.Unstructured, error) {
	docs, err := e.documents()
	if err != nil || len(docs) == 0 {
		return nil, err
	}
	objs := make([]*unstructured.Unstructured, len(docs))
	for i, b := range docs {
		if objs[i], err = decodeDoc(b); err != nil {
			return nil, err
		}
	}
	return objs, nil
}

// decodeDoc decodes one object's JSON as the render cache wrote it (utiljson: integers stay
// integers), into maps of its own.
func decodeDoc(doc []byte) (*unstructured.Unstructured, error) {
	var obj map[string]any
	if err := utiljson.Unmarshal(doc, &obj); err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: obj}, nil
}

// encodeObjects writes each of objs as JSON as the render cache does (compressObjects),
// for a render too large to be kept.
func encodeObjects(objs []*unstructured.Unstructured) ([][]byte, error) {
	enc := newDocEncoder()
	docs := make([][]byte, len(objs))
	for i, o := range objs {
		doc, err := enc.encode(o)
		if err != nil {
			return nil, err
		}
		docs[i] = bytes.Clone(doc)
	}
	return docs, nil
}

// docEncoder writes objects as the render cache keeps them: compact JSON without HTML
// escaping (a tenant's "<" costs one byte, not six), sorted keys, no trailing newline.
type docEncoder struct {
	buf bytes.Buffer
	enc *json.Encoder
}

func newDocEncoder() *docEncoder {
	e := &docEncoder{}
	e.enc = json.NewEncoder(&e.buf)
	e.enc.SetEscapeHTML(false)
	return e
}

// encode returns o's document, valid until the next call.
func (e *docEncoder) encode(o *unstructured.Unstructured) ([]byte, error) {
	e.buf.Reset()
	if err := e.enc.Encode(o.Object); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(e.buf.Bytes(), []byte("\n")), nil
}

// reload replaces each of objs, the objects e was made from (same order), by the decode of
// its JSON, one at a time, so that the objects it replaces can go while the others are
// decoded. An object whose JSON does not decode (e encoded it: it cannot fail) stays.
func (e cacheEntry) reload(objs []*unstructured.Unstructured) {
	docs, err := e.documents()
	if err != nil {
		return
	}
	for i, b := range docs {
		var obj map[string]any
		if i < len(objs) && utiljson.Unmarshal(b, &obj) == nil {
			objs[i] = &unstructured.Unstructured{Object: obj}
		}
	}
}

// own records that key is owner's last load (owner "" is nobody) and drops the render the
// owner leaves when no other owner's last load is that render.
func (c *renderCache) own(owner, key string) {
	if owner == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old, had := c.owners[owner]
	if had && old == key {
		return
	}
	c.owners[owner] = key
	c.refs[key]++
	if had {
		c.release(old)
	}
}

// forget drops owner's hold on its last load, as own does for a new one.
func (c *renderCache) forget(owner string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, had := c.owners[owner]; had {
		delete(c.owners, owner)
		c.release(old)
	}
}

// release takes one owner off key, dropping the render when none is left; c.mu must be held.
func (c *renderCache) release(key string) {
	if c.refs[key]--; c.refs[key] > 0 {
		return
	}
	delete(c.refs, key)
	c.drop(key)
}

// drop removes key's render; c.mu must be held. Owners keep their record: a later load of
// the same key renders again.
func (c *renderCache) drop(key string) {
	if e, ok := c.entries[key]; ok {
		c.bytes -= e.size
	}
	delete(c.entries, key)
	if i := slices.Index(c.order, key); i >= 0 {
		c.order = slices.Delete(c.order, i, i+1)
	}
}

// touch moves key to the front of the recency order; c.mu must be held.
func (c *renderCache) touch(key string) {
	if i := slices.Index(c.order, key); i >= 0 {
		c.order = slices.Delete(c.order, i, i+1)
	}
	c.order = slices.Insert(c.order, 0, key)
}

// entrySize is the heap bytes a kept render takes: its JSON, origins and ordered documents
// with their slice headers.
func entrySize(e cacheEntry) int64 {
	n := int64(len(e.docs)) + 8*int64(len(e.ends))
	for _, s := range e.origins {
		n += int64(len(s)) + 16
	}
	for _, b := range e.ordered {
		n += int64(len(b)) + 24
	}
	return n
}

// digestDir hashes the names, kinds and contents of the files under root, hidden folders
// (such as .git) and what ign holds excepted. It names the content of a local source.
func digestDir(ctx context.Context, root string, ign ignoredSet) (string, error) {
	h := sha256.New()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel := relSlash(root, p)
		switch {
		case d.IsDir() && (strings.HasPrefix(d.Name(), ".") && p != root || ign.has(rel)):
			return filepath.SkipDir
		case ign.has(rel):
			return nil
		case d.IsDir():
			return nil
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "L %q %q\n", rel, target)
			return nil
		case !d.Type().IsRegular():
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		info, err := f.Stat()
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "F %q %d\n", rel, info.Size())
		_, err = io.Copy(h, f)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("digest %s: %w", root, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
