package git

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"github.com/skeema/knownhosts"
	"golang.org/x/crypto/ssh"
)

// authMethod builds the go-git auth for the URL's scheme. It returns nil for anonymous HTTP
// and for local repositories.
func authMethod(rawURL string, a Auth, timeout time.Duration) (transport.AuthMethod, error) {
	ep, err := transport.NewEndpoint(rawURL)
	if err != nil {
		return nil, fmt.Errorf("parse url %s: %w", redact(rawURL), err)
	}
	switch ep.Protocol {
	case "http", "https":
		switch {
		case a.BearerToken != "":
			return &githttp.TokenAuth{Token: a.BearerToken}, nil
		case a.Username != "" || a.Password != "":
			return &githttp.BasicAuth{Username: a.Username, Password: a.Password}, nil
		}
		return nil, nil
	case "ssh":
		return sshAuth(ep, a, timeout)
	case "file":
		return nil, nil
	default:
		return nil, fmt.Errorf("url %s: unsupported protocol %q", redact(rawURL), ep.Protocol)
	}
}

// timeoutAuth is go-git's public-key auth with the SSH dial bounded by a timeout (go-git
// dials without a context).
type timeoutAuth struct {
	*gitssh.PublicKeys
	timeout time.Duration
}

// ClientConfig returns the SSH client config with the dial timeout set.
func (a *timeoutAuth) ClientConfig() (*ssh.ClientConfig, error) {
	cfg, err := a.PublicKeys.ClientConfig()
	if err != nil {
		return nil, err
	}
	cfg.Timeout = a.timeout
	return cfg, nil
}

func sshAuth(ep *transport.Endpoint, a Auth, timeout time.Duration) (transport.AuthMethod, error) {
	hostAndPort := net.JoinHostPort(ep.Host, strconv.Itoa(sshPort(ep.Port)))
	if len(a.SSHPrivateKey) == 0 {
		return nil, fmt.Errorf("ssh %s: %w: no private key given", hostAndPort, ErrAuth)
	}
	if len(a.SSHKnownHosts) == 0 {
		return nil, fmt.Errorf("ssh %s: %w: no known_hosts given", hostAndPort, ErrUnknownHostKey)
	}
	user := ep.User
	if user == "" {
		user = a.Username
	}
	if user == "" {
		user = "git"
	}
	keys, err := gitssh.NewPublicKeys(user, a.SSHPrivateKey, a.Password)
	if err != nil {
		return nil, fmt.Errorf("ssh %s: parse private key: %w", hostAndPort, err)
	}
	db, err := parseKnownHosts(a.SSHKnownHosts)
	if err != nil {
		return nil, fmt.Errorf("ssh %s: parse known_hosts: %w", hostAndPort, err)
	}
	// The host key is checked against the given known_hosts only; go-git's fallback to the
	// user's files and any "insecure" callback are never used.
	keys.HostKeyCallback = db.HostKeyCallback()
	keys.HostKeyAlgorithms = db.HostKeyAlgorithms(hostAndPort)
	return &timeoutAuth{PublicKeys: keys, timeout: timeout}, nil
}

func sshPort(p int) int {
	if p == 0 {
		return 22
	}
	return p
}

// parseKnownHosts loads known_hosts content. The knownhosts packages only read files, so
// the content goes through a private temporary file that is removed at once.
func parseKnownHosts(content []byte) (*knownhosts.HostKeyDB, error) {
	f, err := os.CreateTemp("", "converge-known-hosts-*")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.Remove(f.Name()) }()
	if _, err := f.Write(content); err != nil {
		_ = f.Close()
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return knownhosts.NewDB(f.Name())
}

// classify maps transport failures to this package's sentinel errors so callers can tell
// an auth or host-key problem from a flaky network.
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case knownhosts.IsHostUnknown(err):
		return fmt.Errorf("%w: host key unknown (add it to known_hosts): %w", ErrUnknownHostKey, err)
	case knownhosts.IsHostKeyChanged(err):
		return fmt.Errorf("%w: host key does not match known_hosts: %w", ErrUnknownHostKey, err)
	case errors.Is(err, transport.ErrAuthenticationRequired),
		errors.Is(err, transport.ErrAuthorizationFailed),
		strings.Contains(err.Error(), "ssh: unable to authenticate"):
		return fmt.Errorf("%w: %w", ErrAuth, err)
	}
	return err
}

// redact removes credentials from a URL before it appears in an error or a log.
func redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.User == nil {
		return rawURL
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "redacted")
	}
	return u.String()
}
