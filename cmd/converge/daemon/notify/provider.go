package notify

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// Type is a kind of receiver.
type Type string

// The receivers a Provider can name.
const (
	// Generic POSTs the Event as JSON.
	Generic Type = "generic"
	// GenericHMAC is Generic with an "X-Signature: sha256=<hex>" header, the HMAC-SHA256 of
	// the body with Provider.HMACKey.
	GenericHMAC Type = "generic-hmac"
	// Slack POSTs to a Slack-compatible incoming webhook (text and one attachment).
	Slack Type = "slack"
	// MSTeams POSTs an Adaptive Card to a Microsoft Teams (workflow) incoming webhook.
	MSTeams Type = "msteams"
	// GitHub sets a commit status: POST /repos/{owner}/{repo}/statuses/{sha}.
	GitHub Type = "github"
	// GitLab sets a commit status: POST /api/v4/projects/{path}/statuses/{sha}.
	GitLab Type = "gitlab"
	// Gitea sets a commit status: POST /api/v1/repos/{owner}/{repo}/statuses/{sha}.
	Gitea Type = "gitea"
)

// Provider is one receiver and what it takes to reach it. The caller reads the secret
// values (as the Sync's identity) before handing it over; none of them ever appears in an
// error.
type Provider struct {
	// Name identifies the provider in hooks, logs and metric labels ("apps/chat"); it is
	// not sent.
	Name string
	// Type is the kind of receiver.
	Type Type
	// Address is the webhook URL (generic, generic-hmac, slack, msteams) or the repository's
	// https URL (github, gitlab, gitea: "https://github.com/org/repo"). A webhook address's
	// path and query are treated as secret: a Slack or Teams webhook URL is a credential.
	Address string
	// Token is a bearer token (generic, slack), a personal access token (github, gitlab,
	// gitea).
	Token string
	// HMACKey signs generic-hmac bodies.
	HMACKey []byte
	// Username and Password are sent as basic auth (generic, generic-hmac).
	Username, Password string
	// Channel overrides the Slack channel (needed with a bot token and chat.postMessage).
	Channel string
	// CABundle is PEM: the only roots trusted for the address when set.
	CABundle []byte
	// Cluster keys commit statuses ("converge/<cluster>/<namespace>/<name>") so two
	// clusters deploying one commit do not overwrite each other's status; empty: the
	// Event's Cluster.
	Cluster string
}

// redacted is p with its secrets removed and its address cut to scheme and host: what a
// hook receives.
func (p Provider) redacted() Provider {
	return Provider{Name: p.Name, Type: p.Type, Address: origin(p.Address), Channel: p.Channel, Cluster: p.Cluster}
}

// origin is "scheme://host" of an address, or "" when it does not parse.
func origin(address string) string {
	u, err := url.Parse(address)
	if err != nil || u.Host == "" {
		return ""
	}
	return u.Scheme + "://" + u.Host
}

// ErrInvalid is wrapped by every error about a Provider's configuration: retrying cannot
// help.
var ErrInvalid = errors.New("invalid notification provider")

// Validate checks p without sending anything: its type, its address, and the secrets its
// type needs.
func (p Provider) Validate() error {
	_, err := p.target()
	return err
}

// target is a validated Provider: the address parsed once.
type target struct {
	Provider
	url *url.URL
	// repo is the repository path of a commit-status provider ("org/repo").
	repo []string
}

func (p Provider) invalid(format string, args ...any) error {
	return fmt.Errorf("%s provider %q: %w: %s", p.Type, p.Name, ErrInvalid, fmt.Sprintf(format, args...))
}

func (p Provider) target() (*target, error) {
	u, err := url.Parse(p.Address)
	if err != nil {
		// url.Parse quotes the whole address: say only that it does not parse.
		return nil, p.invalid("address is not a URL")
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return nil, p.invalid("address scheme %q: want https or http", u.Scheme)
	}
	if u.Host == "" || u.User != nil || u.Fragment != "" {
		return nil, p.invalid("address %s: want scheme://host/path without user info or fragment", origin(p.Address))
	}
	t := &target{Provider: p, url: u}
	switch p.Type {
	case Generic, Slack, MSTeams:
	case GenericHMAC:
		if len(p.HMACKey) == 0 {
			return nil, p.invalid("no HMAC key")
		}
	case GitHub, GitLab, Gitea:
		if p.Token == "" {
			return nil, p.invalid("no token")
		}
		if t.repo, err = repoPath(p.Type, u); err != nil {
			return nil, p.invalid("%v", err)
		}
	default:
		return nil, fmt.Errorf("provider %q: %w: unknown type %q (want generic, generic-hmac, slack, msteams, github, gitlab or gitea)", p.Name, ErrInvalid, p.Type)
	}
	return t, nil
}

// repoSegment is one segment of a repository path on GitHub, GitLab and Gitea.
var repoSegment = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]*$`)

// repoPath parses a repository address strictly: "https://host/owner/repo" (an optional
// ".git" and trailing slash), with GitLab's nested groups ("group/sub/project"); no query.
func repoPath(typ Type, u *url.URL) ([]string, error) {
	if u.RawQuery != "" {
		return nil, errors.New("repository address has a query")
	}
	if u.RawPath != "" {
		return nil, fmt.Errorf("repository path %q has escaped characters", u.RawPath)
	}
	p := strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), ".git")
	segs := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for _, s := range segs {
		if !repoSegment.MatchString(s) || strings.HasSuffix(s, ".") {
			return nil, fmt.Errorf("repository path %q: want /owner/repo", u.Path)
		}
	}
	if len(segs) < 2 || (typ != GitLab && len(segs) != 2) {
		want := "/owner/repo"
		if typ == GitLab {
			want = "/group[/subgroup…]/project"
		}
		return nil, fmt.Errorf("repository path %q: want %s", u.Path, want)
	}
	return segs, nil
}
