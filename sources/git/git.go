package git

import (
	"context"
	"errors"
	"time"
)

// Ref selects what to fetch. When several fields are set, the most specific wins: Commit,
// then SemVer, then Tag, then Branch. An empty Ref means the remote's default branch (HEAD).
type Ref struct {
	// Branch is a branch name, e.g. "main". With Commit it only names the revision.
	Branch string
	// Tag is a tag name, e.g. "v1.2.3".
	Tag string
	// SemVer is a Masterminds semver constraint over tags, e.g. ">=1.2.0 <2.0.0"; the
	// highest matching tag wins.
	SemVer string
	// Commit is a full 40-hex commit SHA.
	Commit string
}

// String returns a short human description of the ref, used in error messages.
func (r Ref) String() string {
	switch {
	case r.Commit != "":
		return "commit " + r.Commit
	case r.SemVer != "":
		return "semver " + r.SemVer
	case r.Tag != "":
		return "tag " + r.Tag
	case r.Branch != "":
		return "branch " + r.Branch
	default:
		return "default branch"
	}
}

// Auth holds credentials. Which fields are used depends on the URL scheme: Username and
// Password or BearerToken for HTTP(S), SSHPrivateKey and SSHKnownHosts for SSH.
type Auth struct {
	// Username is the HTTP basic-auth user, or the SSH user when the URL names none
	// (default "git").
	Username string
	// Password is the HTTP basic-auth password, or the passphrase of SSHPrivateKey.
	Password string
	// BearerToken is sent as "Authorization: Bearer <token>" over HTTP(S).
	BearerToken string
	// SSHPrivateKey is a PEM or OpenSSH private key.
	SSHPrivateKey []byte
	// SSHKnownHosts is the known_hosts content the SSH host key must match. It is
	// required for SSH: an unknown or changed host key is an error, never a silent accept.
	SSHKnownHosts []byte
}

// Repository names a remote repository and what to fetch from it.
type Repository struct {
	// URL is an https://, http://, ssh://, scp-like (git@host:org/repo) or, with
	// FetchOptions.AllowLocal, a file:// URL or a local path. Its host may be on this
	// machine or its link (loopback, link-local, …) only with FetchOptions.AllowLocal.
	URL  string
	Ref  Ref
	Auth Auth
	// Verify, when set, has Fetch check signatures before the commit is exported.
	Verify *Verification
}

// Checkout is one fetched commit, exported as plain files.
type Checkout struct {
	// Dir holds the commit's files. It is shared and must be treated as read-only; it stays
	// until several newer commits of the same URL and credentials have been fetched, and at
	// least until Release or the deadline of the ctx it was fetched under.
	Dir string
	// Revision is "<branch or tag>@sha1:<hex>", or "sha1:<hex>" for a bare commit.
	Revision string
	// Commit is the 40-hex commit SHA.
	Commit string
	// CommitTime is the committer time of the commit.
	CommitTime time.Time
	// Signatures are the signatures Repository.Verify checked; nil without it.
	Signatures []Signature

	release func()
}

// Release says the caller is done reading Dir: once every reader that fetched it has
// released it, the checkout is no longer reserved (it may be removed to keep the cache
// under its quota) rather than until its fetches' deadlines. Safe to call more than once.
func (c *Checkout) Release() {
	if c != nil && c.release != nil {
		c.release()
	}
}

// FetchOptions are per-call settings of Fetch.
type FetchOptions struct {
	// Timeout bounds the whole fetch, ref lookup included. Zero means no limit beyond ctx.
	Timeout time.Duration
	// KeepCheckouts is how many exported commits of one URL and credentials are kept on
	// disk; older ones are removed after a fetch exports a new one. At least 1.
	KeepCheckouts int
	// AllowLocal allows repositories on this machine: a file:// URL or a local path, and
	// connections (HTTP, HTTPS, SSH, redirects included) to a loopback, link-local (cloud
	// metadata, 169.254.169.254), unspecified or multicast address, however the host name
	// resolves. The daemon leaves it off unless its operator turns it on
	// (--allow-local-git): a Sync's URL is tenant input, and could otherwise read any
	// repository on the daemon's disk or reach the daemon's own ports and the node's
	// metadata service. Private addresses (10/8, 192.168/16, fc00::/7, …) are allowed
	// either way: in-cluster git servers live there. The CLI and tests turn it on. A URL
	// into the Fetcher's own cache is refused even then, since the cache holds what other
	// credentials fetched.
	AllowLocal bool
	// MaxFiles bounds the files (symlinks included) a commit may hold; a larger commit is
	// refused before it is written out. Zero means no limit.
	MaxFiles int
	// MaxFileSize bounds the size in bytes of one file of a commit. Zero means no limit.
	MaxFileSize int64
	// MaxTotalSize bounds the sum of the sizes of a commit's files. Zero means no limit.
	MaxTotalSize int64
	// MaxFetchSize bounds the bytes one fetch reads from the remote (ref listings and packs,
	// over HTTP and SSH): a remote cannot stream an endless pack into the cache. A fetch
	// over it fails (terminal ErrTooLarge) and leaves no partial pack. Zero means no limit.
	MaxFetchSize int64
	// CacheQuota bounds the bytes the Fetcher's whole cache directory holds on disk: after
	// a fetch that wrote to the cache, the least recently used entries (one per URL and
	// credentials) that no fetch holds and no reader reserved are removed until it fits,
	// and a fetch whose own entry is over the quota fails (terminal ErrTooLarge). A fetch
	// also downloads at most a quarter of it (a pack is on disk twice while it is checked),
	// and
	// claims what it writes before writing it, so fetches in flight never pass it together
	// (ErrCacheFull, transient). Zero means no limit.
	CacheQuota int64
	// IndexSlot, when set, is taken around handing a received pack to the repository, where
	// go-git indexes it with a delta cache of up to 96 MiB: the caller bounds how many packs
	// are indexed at once (the daemon gives its render slots, so that the memory a slot may
	// take covers an index too). It returns the func that gives the slot back.
	IndexSlot func(ctx context.Context) (func(), error)
	// Owner names who the fetch is for (a Sync): Fetcher.Forget(Owner) removes the cache
	// entries no other owner's last fetch used. Empty: the fetch has no owner.
	Owner string
	// Tenant names whose fetch it is (a Sync's namespace): a tenant's fetches in flight
	// together claim at most half of CacheQuota beyond the first one's.
	Tenant string
}

// Default export limits: far above a repository of manifests, low enough that a hostile or
// mistaken repository cannot fill the daemon's disk with its checkouts.
const (
	DefaultMaxFiles     = 20_000
	DefaultMaxFileSize  = 8 << 20   // 8 MiB
	DefaultMaxTotalSize = 256 << 20 // 256 MiB
	// DefaultMaxFetchSize bounds what one fetch downloads: packs are compressed, and a
	// commit-pinned fetch may need every branch and tag, so it sits well above the export
	// limit.
	DefaultMaxFetchSize = 1 << 30 // 1 GiB
)

// DefaultFetchOptions returns a two-minute timeout, three kept checkouts, the default
// export limits, and local repositories refused.
func DefaultFetchOptions() FetchOptions {
	return FetchOptions{
		Timeout: 2 * time.Minute, KeepCheckouts: 3,
		MaxFiles: DefaultMaxFiles, MaxFileSize: DefaultMaxFileSize, MaxTotalSize: DefaultMaxTotalSize,
		MaxFetchSize: DefaultMaxFetchSize,
	}
}

// Stats counts what a Fetcher did, for tests and metrics.
type Stats struct {
	// Lookups counts remote ref advertisements read.
	Lookups int
	// Transfers counts pack fetches performed (zero when the commit was already cached).
	Transfers int
}

var (
	// ErrRefNotFound reports that the requested branch, tag, semver range or commit does
	// not exist on the remote.
	ErrRefNotFound = errors.New("ref not found")
	// ErrUnknownHostKey reports an SSH host key missing from, or different to, known_hosts.
	ErrUnknownHostKey = errors.New("ssh host key not accepted by known_hosts")
	// ErrAuth reports rejected or missing credentials.
	ErrAuth = errors.New("authentication failed")
	// ErrLocalURL reports a file:// URL, a local path or a connection to an address on this
	// machine or its link (see AddressError) where local repositories are not allowed
	// (FetchOptions.AllowLocal), or a URL into the fetcher's own cache.
	ErrLocalURL = errors.New("local repository not allowed")
	// ErrTooLarge reports a commit over an export limit of FetchOptions.
	ErrTooLarge = errors.New("repository too large")
	// ErrUnsafeTree reports a tree entry that would be written outside its own path: under
	// a symlink of the same commit, outside the checkout, or into a .git folder.
	ErrUnsafeTree = errors.New("unsafe tree entry")
	// ErrCacheFull is returned when the git cache has no room for what a fetch would write
	// while other fetches and renders use every other entry (transient).
	ErrCacheFull = errors.New("the git cache is full")
)

// IsTerminal reports whether a Fetch error stays until the Sync's spec or the repository
// changes (a refused URL, a commit over a limit or with unsafe entries, a failed signature
// verification), as opposed to a network or server failure worth retrying.
func IsTerminal(err error) bool {
	var ve *VerificationError
	return errors.Is(err, ErrLocalURL) || errors.Is(err, ErrTooLarge) || errors.Is(err, ErrUnsafeTree) ||
		errors.As(err, &ve)
}
