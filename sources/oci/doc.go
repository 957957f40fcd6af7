// Package oci fetches an artifact from an OCI registry, in Flux's format (`flux push
// artifact`: an image manifest whose first layer is a tar+gzip of the files, media type
// application/vnd.cncf.flux.content.v1.tar+gzip) or with a layer selector, and extracts it
// into a local, read-only directory named by a revision string ("v1.2.3@sha256:<hex>", or
// "sha256:<hex>" for a digest reference).
//
// One Fetch: resolve the reference (a tag by one HEAD of its manifest, a semver range by
// listing the tags, a digest by one HEAD) with the caller's credentials, so that a cached
// artifact is never served to a caller the registry would refuse; then, unless the manifest
// digest is cached, read the manifest (at most MaxManifestSize), download the selected
// layer into a temporary file within the fetch's byte budget, check its digest against the
// manifest, run the caller's Verify hook, and extract it. The extraction trusts nothing in
// the layer: it writes through an os.Root, refuses absolute names, "..", links that lead
// out, devices and names written twice, and counts files and inflated bytes against the
// limits as they are inflated (a gzip bomb stops at the limit, not after).
//
// With Artifact.Verify, the resolved manifest must carry a cosign signature (classic
// format, public key: the tag "sha256-<hex>.sig" of the same repository) by a trusted key
// before anything else is read, on every fetch, cached or not: one more resolve and, for a
// signed artifact, one manifest and one payload read per fetch. Keyless signatures (Fulcio,
// Rekor) and the sigstore bundle format are not supported.
//
// Every connection goes through the sources/netguard dial guard (redirects and token
// endpoints included); the whole fetch is bounded by FetchOptions.Timeout. The cache on
// disk holds one directory per manifest digest and layer selection, least recently used
// removed past FetchOptions.CacheQuota.
//
// It must not import kube clients, kustomize or the rest of Converge.
package oci
