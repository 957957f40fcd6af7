package registry

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"

	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
)

// Media types of Flux's artifact format (`flux push artifact`).
const (
	FluxConfigMediaType  = "application/vnd.cncf.flux.config.v1+json"
	FluxContentMediaType = "application/vnd.cncf.flux.content.v1.tar+gzip"
)

// Layer is one layer to push.
type Layer struct {
	MediaType string
	Data      []byte
	// Title is the org.opencontainers.image.title annotation; empty: none.
	Title string
}

// Tarball returns a tar+gzip of files (name → content), in name order.
func Tarball(t testing.TB, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(files[n])), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(files[n])); err != nil {
			t.Fatal(err)
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

// Repository returns an oras-go client of repo on this registry, with its credentials.
func (r *Registry) Repository(t testing.TB, repo string) *remote.Repository {
	t.Helper()
	rp, err := remote.NewRepository(r.Host + "/" + repo)
	if err != nil {
		t.Fatal(err)
	}
	rp.PlainHTTP = !r.opts.TLS
	rp.Client = &auth.Client{Client: r.HTTPClient(), Cache: auth.NewCache(),
		Credential: auth.StaticCredential(r.Host, auth.Credential{Username: r.opts.Username, Password: r.opts.Password})}
	return rp
}

// PushFiles pushes files as a Flux artifact (one tar+gzip content layer) tagged tag, and
// returns the manifest digest.
func (r *Registry) PushFiles(t testing.TB, repo, tag string, files map[string]string) digest.Digest {
	t.Helper()
	return r.Push(t, repo, tag, Layer{MediaType: FluxContentMediaType, Data: Tarball(t, files)})
}

// Push pushes an image manifest of layers with Flux's config media type, tagged tag, and
// returns its digest.
func (r *Registry) Push(t testing.TB, repo, tag string, layers ...Layer) digest.Digest {
	t.Helper()
	ctx, cancel := pushContext()
	defer cancel()
	rp := r.Repository(t, repo)
	push := func(mediaType string, data []byte, ann map[string]string) ocispec.Descriptor {
		d := ocispec.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(data), Size: int64(len(data)), Annotations: ann}
		if err := rp.Push(ctx, d, bytes.NewReader(data)); err != nil {
			t.Fatalf("push %s to %s: %v", mediaType, repo, err)
		}
		return d
	}
	m := ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest,
		Config:      push(FluxConfigMediaType, []byte("{}"), nil),
		Annotations: map[string]string{ocispec.AnnotationCreated: "2026-11-26T00:00:00Z", ocispec.AnnotationSource: "test"}}
	for _, l := range layers {
		var ann map[string]string
		if l.Title != "" {
			ann = map[string]string{ocispec.AnnotationTitle: l.Title}
		}
		m.Layers = append(m.Layers, push(l.MediaType, l.Data, ann))
	}
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	d := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromBytes(data), Size: int64(len(data))}
	if err := rp.PushReference(ctx, d, bytes.NewReader(data), tag); err != nil {
		t.Fatalf("push manifest %s:%s: %v", repo, tag, err)
	}
	return d.Digest
}

// BlobPath is where the registry stores blob d: a test may overwrite it to tamper with a
// layer the registry then serves as is.
func (r *Registry) BlobPath(d digest.Digest) string {
	return filepath.Join(r.Storage, "docker/registry/v2/blobs", d.Algorithm().String(), d.Encoded()[:2], d.Encoded(), "data")
}
