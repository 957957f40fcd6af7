package oci

import (
	"context"
	"errors"
	"fmt"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/registry/remote"
)

// FluxContentMediaType is the media type of the content layer `flux push artifact` writes.
const FluxContentMediaType = "application/vnd.cncf.flux.content.v1.tar+gzip"

// Ref selects the artifact of a repository: at most one field is set; none means the tag
// "latest", as Flux's OCIRepository.
type Ref struct {
	// Tag is a tag, e.g. "v1.2.3".
	Tag string
	// SemVer is a Masterminds semver constraint over the tags, e.g. ">=1.2.0 <2.0.0"; the
	// highest matching tag wins.
	SemVer string
	// Digest is a manifest digest, "sha256:<64 hex>".
	Digest string
}

// String describes the ref for messages.
func (r Ref) String() string {
	switch {
	case r.Digest != "":
		return "digest " + r.Digest
	case r.SemVer != "":
		return "semver " + r.SemVer
	case r.Tag != "":
		return "tag " + r.Tag
	}
	return "tag latest"
}

// Operations of a LayerSelector.
const (
	// OperationExtract unpacks the layer (tar, gzip-compressed or not) into the directory.
	OperationExtract = "extract"
	// OperationCopy writes the layer as one file, named by its
	// org.opencontainers.image.title annotation (else "layer").
	OperationCopy = "copy"
)

// LayerSelector picks the layer of the manifest, as Flux's OCIRepository layerSelector.
type LayerSelector struct {
	// MediaType selects the first layer of this media type; empty: the first layer.
	MediaType string
	// Operation is OperationExtract (default) or OperationCopy.
	Operation string
	// File names the file OperationCopy writes; empty: the layer's
	// org.opencontainers.image.title annotation, else "layer".
	File string
}

// HelmChartMediaType is the media type of the layer `helm push` writes: the packaged chart.
const HelmChartMediaType = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"

// Auth holds registry credentials, as a kubernetes.io/dockerconfigjson Secret and a CA.
type Auth struct {
	// DockerConfigJSON is the content of a .dockerconfigjson: the entry of the artifact's
	// registry host is used. Empty: anonymous.
	DockerConfigJSON []byte
	// Username and Password are used when DockerConfigJSON is empty (a Secret with
	// username and password, as Flux's HelmRepository of type oci takes).
	Username, Password string
	// CA is a PEM bundle trusted besides the system roots for HTTPS.
	CA []byte
}

// Artifact names an artifact in a registry and how to read it.
type Artifact struct {
	// URL is "oci://host[:port]/repository".
	URL   string
	Ref   Ref
	Layer LayerSelector
	Auth  Auth
	// Insecure speaks plain HTTP to the registry.
	Insecure bool
	// Verify, if set, requires a cosign signature of the resolved manifest by one of its
	// keys before anything of the artifact is read or a cached extraction returned, on
	// every fetch.
	Verify *Verification
}

// String describes the artifact for messages, without credentials: "oci://host/repo:tag",
// "oci://host/repo@sha256:…" or "oci://host/repo (semver >=1.0)".
func (a Artifact) String() string {
	switch {
	case a.Ref.Digest != "":
		return a.URL + "@" + a.Ref.Digest
	case a.Ref.SemVer != "":
		return fmt.Sprintf("%s (semver %s)", a.URL, a.Ref.SemVer)
	case a.Ref.Tag != "":
		return a.URL + ":" + a.Ref.Tag
	}
	return a.URL + ":latest"
}

// Subject is what a Verify hook checks: the resolved manifest, before anything of the
// artifact is read or a cached extraction is returned.
type Subject struct {
	// Artifact is the fetch's artifact.
	Artifact Artifact
	// Manifest is the manifest's descriptor (its digest names the revision).
	Manifest ocispec.Descriptor
	// Repository reads the registry with the fetch's credentials, dial guard and byte
	// budget (signatures, attestations, referrers).
	Repository *remote.Repository
}

// FetchOptions are per-call settings of Fetch.
type FetchOptions struct {
	// Timeout bounds the whole fetch: every request, the download and the extraction.
	Timeout time.Duration
	// AllowLocal allows registries on this machine or its link (see sources/netguard).
	AllowLocal bool
	// MaxFiles, MaxFileSize and MaxTotalSize bound the extracted files: their count, one
	// file's size, and the sum of the inflated bytes. Zero means no limit.
	MaxFiles     int
	MaxFileSize  int64
	MaxTotalSize int64
	// MaxFetchSize bounds the bytes one fetch reads from the registry (answers of every
	// request, the layer included). Zero means no limit.
	MaxFetchSize int64
	// CacheQuota bounds the bytes of the extracted artifacts the cache keeps: least recently
	// used ones no fetch holds are removed past it. Zero means no limit.
	CacheQuota int64
	// Verify, if set, runs once the reference is resolved to a manifest digest, before the
	// manifest is read, the layer downloaded or extracted, or a cached extraction returned:
	// the place for signature verification. The layer is then checked against the verified
	// manifest's digest of it. Its error fails the fetch, wrapped with the artifact.
	Verify func(ctx context.Context, s Subject) error
}

// MaxManifestSize bounds a manifest or a tag list page read into memory.
const MaxManifestSize = 4 << 20

// DefaultFetchOptions returns a two-minute timeout, the git export's limits (8 MiB per
// file, 256 MiB in all, 20,000 files), a 1 GiB fetch budget, and local registries refused.
func DefaultFetchOptions() FetchOptions {
	return FetchOptions{Timeout: 2 * time.Minute, MaxFiles: 20_000, MaxFileSize: 8 << 20,
		MaxTotalSize: 256 << 20, MaxFetchSize: 1 << 30}
}

// Result is one fetched artifact.
type Result struct {
	// Dir holds the artifact's files; read-only, kept at least until the deadline of the
	// ctx it was fetched under.
	Dir string
	// Revision is "<tag>@sha256:<hex>", or "sha256:<hex>" for a digest reference.
	Revision string
	// Digest is the manifest digest, "sha256:<hex>".
	Digest string
	// Signature is the verified signature (Artifact.Verify); nil without verification.
	Signature *Signature
}

// Stats counts what a Fetcher did.
type Stats struct {
	// Resolves counts references resolved on the registry.
	Resolves int
	// Downloads counts layers downloaded (zero when the manifest digest was cached).
	Downloads int
}

var (
	// ErrNotFound reports a tag, semver range, digest or repository the registry does not hold.
	ErrNotFound = errors.New("artifact not found")
	// ErrAuth reports credentials the registry refused, or a missing Secret entry.
	ErrAuth = errors.New("registry refused the credentials")
	// ErrInvalid reports a malformed URL, ref, selector, manifest or Secret: the spec must change.
	ErrInvalid = errors.New("invalid artifact reference")
	// ErrDigest reports a layer or manifest whose bytes do not match their digest.
	ErrDigest = errors.New("digest mismatch")
	// ErrTooLarge reports an artifact over a limit of FetchOptions.
	ErrTooLarge = errors.New("artifact too large")
	// ErrUnsafeEntry reports a tar entry that would be written outside the directory, a
	// link leading out, a device, or a name written twice.
	ErrUnsafeEntry = errors.New("unsafe tar entry")
	// ErrLocal reports a connection to an address on this machine or its link, refused
	// without AllowLocal.
	ErrLocal = errors.New("local registry not allowed")
)

// IsTerminal reports whether a Fetch error stays until the spec or the artifact changes,
// as opposed to a network or registry failure worth retrying.
func IsTerminal(err error) bool {
	for _, e := range []error{ErrInvalid, ErrDigest, ErrTooLarge, ErrUnsafeEntry, ErrLocal} {
		if errors.Is(err, e) {
			return true
		}
	}
	var ve *VerificationError
	return errors.As(err, &ve)
}
