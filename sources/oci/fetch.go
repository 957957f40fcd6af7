package oci

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"

	"github.com/converge-dev/converge/sources/cachekey"
	"github.com/converge-dev/converge/sources/diskcache"
)

// Fetcher fetches artifacts into a cache directory, one folder per registry, repository,
// credentials, manifest digest and layer selection. It is safe for concurrent use; fetches of the same folder are
// serialized, others run in parallel.
type Fetcher struct {
	cache *diskcache.Cache
	// keyer names a folder by the registry, repository, credentials and CA it was read
	// with, besides the manifest digest and layer selection: a folder is never served to a
	// fetch that did not download it from the same place with the same credentials (a
	// registry that answers with another tenant's digest gets nothing from the cache).
	keyer *cachekey.Keyer

	mu    sync.Mutex
	stats Stats
	// auths keep each registry's auth scheme and tokens between fetches, one cache per
	// registry and credential (never shared between credentials), so that a poll of a
	// cached tag is one request, not a challenge and a token exchange first.
	auths map[string]auth.Cache
}

// maxAuthCaches bounds auths; past it they are all dropped (a fetch then pays one
// challenge again).
const maxAuthCaches = 1024

// authCache returns the auth cache of cred on registry host.
func (f *Fetcher) authCache(host string, cred auth.Credential) auth.Cache {
	h := sha256.Sum256([]byte(strings.Join([]string{host, cred.Username, cred.Password, cred.RefreshToken, cred.AccessToken}, "\x00")))
	key := hex.EncodeToString(h[:])
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.auths[key]
	if !ok {
		if len(f.auths) >= maxAuthCaches {
			clear(f.auths)
		}
		c = auth.NewCache()
		f.auths[key] = c
	}
	return c
}

// NewFetcher returns a Fetcher that keeps extracted artifacts under cacheDir.
func NewFetcher(cacheDir string) *Fetcher {
	return &Fetcher{cache: diskcache.New(cacheDir), keyer: cachekey.New(cacheDir), auths: map[string]auth.Cache{}}
}

// Stats returns how many references the Fetcher resolved and layers it downloaded.
func (f *Fetcher) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}

// CacheBytes returns the bytes of the extracted artifacts the cache holds.
func (f *Fetcher) CacheBytes() int64 { return f.cache.Total() }

// Fetch resolves a's reference on the registry with a's credentials and returns the
// extracted artifact. When its manifest digest and layer selection were extracted before,
// the resolution is the only request (one HEAD of the manifest for a tag or a digest).
//
// The folder stays on disk at least until ctx's deadline, so a caller that reads it under
// the same ctx never sees it removed half-way.
func (f *Fetcher) Fetch(ctx context.Context, a Artifact, opts FetchOptions) (*Result, error) {
	readUntil, _ := ctx.Deadline()
	if opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.Timeout)
		defer cancel()
	}
	res, err := f.fetch(ctx, a, opts, readUntil)
	if err != nil && opts.Timeout > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) && !IsTerminal(err) {
		return nil, fmt.Errorf("%s: not finished within %v (--fetch-timeout): check that the registry is reachable and answers: %w", a, opts.Timeout, err)
	}
	return res, err
}

func (f *Fetcher) fetch(ctx context.Context, a Artifact, opts FetchOptions, readUntil time.Time) (*Result, error) {
	ref, err := parse(a)
	if err != nil {
		return nil, err
	}
	b := &budget{url: a.String(), limit: opts.MaxFetchSize}
	t, rt, err := newTransport(opts, a, b)
	if err != nil {
		return nil, err
	}
	defer t.CloseIdleConnections()
	cred, err := credential(a.URL, ref.Registry, a.Auth.DockerConfigJSON)
	if len(a.Auth.DockerConfigJSON) == 0 && (a.Auth.Username != "" || a.Auth.Password != "") {
		cred = auth.Credential{Username: a.Auth.Username, Password: a.Auth.Password}
	}
	if err != nil {
		return nil, err
	}
	repo := &remote.Repository{Reference: ref, PlainHTTP: a.Insecure, MaxMetadataBytes: MaxManifestSize, TagListMaxPages: 64,
		Client: &auth.Client{Client: &http.Client{Transport: rt}, Credential: auth.StaticCredential(ref.Registry, cred), Cache: f.authCache(ref.Registry, cred)}}
	tag, desc, err := f.resolve(ctx, repo, a)
	if err != nil {
		return nil, err
	}
	revision := desc.Digest.String()
	if tag != "" {
		revision = tag + "@" + revision
	}
	var sig *Signature
	if a.Verify != nil {
		if sig, err = verifyCosign(ctx, Subject{Artifact: a, Manifest: desc, Repository: repo}, a.Verify); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", a, revision, err)
		}
	}
	if opts.Verify != nil {
		if err := opts.Verify(ctx, Subject{Artifact: a, Manifest: desc, Repository: repo}); err != nil {
			return nil, fmt.Errorf("%s: %s: verify: %w", a, revision, err)
		}
	}
	key, err := f.keyer.Name([]byte(ref.Registry+"/"+ref.Repository), []byte(strconv.FormatBool(a.Insecure)), a.Auth.CA,
		[]byte(cred.Username), []byte(cred.Password), []byte(cred.RefreshToken), []byte(cred.AccessToken),
		[]byte(desc.Digest), []byte(a.Layer.MediaType), []byte(a.Layer.Operation), []byte(a.Layer.File))
	if err != nil {
		return nil, err
	}
	unlock, err := f.cache.Lock(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("%s: waiting for another fetch of the cache folder: %w", a, err)
	}
	defer unlock()
	res := &Result{Dir: f.cache.Path(key), Revision: revision, Digest: desc.Digest.String(), Signature: sig}
	if f.cache.Lookup(key, readUntil) {
		return res, nil
	}
	if err := f.download(ctx, repo, a, desc, key, opts, readUntil); err != nil {
		return nil, err
	}
	return res, nil
}

func (f *Fetcher) count(resolves, downloads int) {
	f.mu.Lock()
	f.stats.Resolves += resolves
	f.stats.Downloads += downloads
	f.mu.Unlock()
}

// download reads the manifest, downloads and checks the selected layer, and extracts it
// into the cache folder key.
func (f *Fetcher) download(ctx context.Context, repo *remote.Repository, a Artifact, desc ocispec.Descriptor, key string, opts FetchOptions, readUntil time.Time) error {
	m, err := fetchManifest(ctx, repo, a, desc)
	if err != nil {
		return err
	}
	layer, err := selectLayer(a, m)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(f.cache.Dir(), 0o700); err != nil {
		return err
	}
	blob, err := f.downloadLayer(ctx, repo, a, layer, opts)
	if err != nil {
		return err
	}
	defer os.Remove(blob.Name())
	defer blob.Close()
	f.count(0, 1)
	tmp, err := os.MkdirTemp(f.cache.Dir(), diskcache.TmpPrefix)
	if err != nil {
		return err
	}
	_, err = unpack(a, layer, blob, tmp, opts)
	if err == nil {
		err = os.Rename(tmp, f.cache.Path(key))
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	if size, ok := f.cache.Add(key, readUntil, opts.CacheQuota); !ok { // disk blocks, folders and links included
		return fmt.Errorf("%s: %w: %d bytes extracted, over the OCI cache quota of %d bytes (--oci-cache-quota)", a, ErrTooLarge, size, opts.CacheQuota)
	}
	return nil
}

// fetchManifest reads an image manifest by digest, at most MaxManifestSize, checked against
// its digest.
func fetchManifest(ctx context.Context, repo *remote.Repository, a Artifact, desc ocispec.Descriptor) (*ocispec.Manifest, error) {
	switch desc.MediaType {
	case ocispec.MediaTypeImageManifest, "application/vnd.docker.distribution.manifest.v2+json":
	default:
		return nil, fmt.Errorf("%s: %w: manifest of media type %q, want an image manifest (push the artifact with flux push artifact or oras push)", a, ErrInvalid, desc.MediaType)
	}
	if desc.Size > MaxManifestSize {
		return nil, fmt.Errorf("%s: manifest: %w: %d bytes, over %d", a, ErrTooLarge, desc.Size, MaxManifestSize)
	}
	rc, err := repo.Fetch(ctx, desc)
	if err != nil {
		return nil, classify(a, "manifest", err)
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, desc.Size+1))
	if err != nil {
		return nil, classify(a, "manifest", err)
	}
	if int64(len(data)) != desc.Size || digest.FromBytes(data) != desc.Digest {
		return nil, fmt.Errorf("%s: manifest: %w: its bytes do not match %s", a, ErrDigest, desc.Digest)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%s: manifest: %w: %v", a, ErrInvalid, err)
	}
	return &m, nil
}

// selectLayer returns the layer a's selector picks: the first of its media type, or the
// first layer.
func selectLayer(a Artifact, m *ocispec.Manifest) (ocispec.Descriptor, error) {
	for _, l := range m.Layers {
		if a.Layer.MediaType == "" || l.MediaType == a.Layer.MediaType {
			if l.Digest.Validate() != nil || l.Digest.Algorithm() != digest.SHA256 || l.Size < 0 {
				return ocispec.Descriptor{}, fmt.Errorf("%s: layer %q: %w: want a sha256 digest and a size", a, l.Digest, ErrInvalid)
			}
			return l, nil
		}
	}
	if a.Layer.MediaType == "" {
		return ocispec.Descriptor{}, fmt.Errorf("%s: %w: the manifest has no layer", a, ErrInvalid)
	}
	return ocispec.Descriptor{}, fmt.Errorf("%s: %w: no layer of media type %q (fix layerSelector.mediaType)", a, ErrInvalid, a.Layer.MediaType)
}

// downloadLayer writes the layer into a temporary file (removed by the caller), within the
// fetch budget, and checks its size and digest against the manifest.
func (f *Fetcher) downloadLayer(ctx context.Context, repo *remote.Repository, a Artifact, layer ocispec.Descriptor, opts FetchOptions) (*os.File, error) {
	if opts.MaxFetchSize > 0 && layer.Size > opts.MaxFetchSize {
		return nil, fmt.Errorf("%s: layer %s: %w: %d bytes, over --max-fetch-size (%d)", a, layer.Digest, ErrTooLarge, layer.Size, opts.MaxFetchSize)
	}
	if opts.CacheQuota > 0 && layer.Size > opts.CacheQuota {
		return nil, fmt.Errorf("%s: layer %s: %w: %d bytes, over the OCI cache quota of %d bytes (--oci-cache-quota)", a, layer.Digest, ErrTooLarge, layer.Size, opts.CacheQuota)
	}
	rc, err := repo.Blobs().Fetch(ctx, layer)
	if err != nil {
		return nil, classify(a, "layer "+layer.Digest.String(), err)
	}
	defer rc.Close()
	tmp, err := os.CreateTemp(f.cache.Dir(), diskcache.TmpPrefix+"layer-")
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(rc, layer.Size+1))
	if err == nil && (n != layer.Size || digest.NewDigest(digest.SHA256, h) != layer.Digest) {
		err = fmt.Errorf("%s: layer: %w: %d bytes of digest %s, the manifest says %d bytes of %s (the registry's copy is damaged or was replaced; push the artifact again)",
			a, ErrDigest, n, digest.NewDigest(digest.SHA256, h), layer.Size, layer.Digest)
	} else if err != nil && !errors.Is(err, ErrTooLarge) {
		err = classify(a, "layer "+layer.Digest.String(), err)
	}
	if err == nil {
		_, err = tmp.Seek(0, io.SeekStart)
	}
	if err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return nil, err
	}
	return tmp, nil
}

// unpack extracts (or copies) the layer read from blob into dir, and returns the bytes
// written.
func unpack(a Artifact, layer ocispec.Descriptor, blob io.Reader, dir string, opts FetchOptions) (int64, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return 0, err
	}
	defer root.Close()
	lim := limits{files: opts.MaxFiles, fileSize: opts.MaxFileSize, totalSize: opts.MaxTotalSize}
	if a.Layer.Operation != OperationCopy {
		return extract(a.String(), blob, root, lim)
	}
	name := a.Layer.File
	if name == "" {
		name = layer.Annotations[ocispec.AnnotationTitle]
	}
	if name == "" || filepath.Base(name) != name || name == "." || name == ".." {
		name = "layer"
	}
	if lim.fileSize > 0 && layer.Size > lim.fileSize {
		return 0, fmt.Errorf("%s: layer %s: %w: %d bytes, over %d (--max-file-size)", a, layer.Digest, ErrTooLarge, layer.Size, lim.fileSize)
	}
	out, err := root.Create(name)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(out, blob)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return n, err
}
