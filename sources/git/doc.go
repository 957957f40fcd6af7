// Package git fetches one commit of a git repository into a local, read-only directory and
// names it with a revision string ("main@sha1:<40 hex>", "v1.2.3@sha1:<40 hex>" or
// "sha1:<40 hex>").
//
// It speaks HTTPS (anonymous, basic auth, bearer token), SSH (private key, host key checked
// against known_hosts, never skipped) and, when FetchOptions.AllowLocal is set (the CLI, not
// the daemon by default), local paths or file:// URLs, through go-git. A Fetcher keeps one
// bare repository per URL and credentials under its cache directory, so a poll that finds
// no new commit costs one ref advertisement and no pack transfer, and what one credential
// fetched is never served to another; branch and tag fetches are shallow. Each fetched
// commit is exported once into its own directory, which callers treat as read-only. The
// export trusts nothing in the commit: it writes through an os.Root, never under a symlink
// of the same commit, and within the file count and size limits of FetchOptions. Every
// connection is checked where it is dialed, on the resolved address: loopback, link-local,
// unspecified and multicast addresses are refused unless FetchOptions.AllowLocal (see
// dial.go for how the guard reaches go-git's process-wide transports). With
// Repository.Verify, the PGP or SSH (sshsig, namespace "git") signature of the commit, of its
// annotated tag, or of both is checked against trusted public keys on every fetch, cached
// commit or not, before the commit is exported: a commit that fails is never written out.
//
// It must not import kube clients, kustomize or the rest of Converge: it only knows git.
package git
