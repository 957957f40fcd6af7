package notify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Limits of each receiver, in characters. GitHub documents 140 for a status description;
// GitLab and Gitea keep 255; chat messages are cut well below Slack's 40,000 and Teams'
// 28 KB so a stack trace in a condition message stays readable.
const (
	maxGitHubDescription = 140
	maxGitDescription    = 255
	maxChatMessage       = 3000
	maxGenericMessage    = 8192
	maxContext           = 255
)

// request is one HTTP request to a receiver, built without I/O.
type request struct {
	url    *url.URL
	header http.Header
	body   []byte
}

// genericBody is what generic and generic-hmac receivers get.
type genericBody struct {
	Namespace  string     `json:"namespace"`
	Name       string     `json:"name"`
	Transition Transition `json:"transition"`
	Revision   string     `json:"revision,omitempty"`
	Reason     string     `json:"reason,omitempty"`
	Message    string     `json:"message,omitempty"`
	Time       time.Time  `json:"time"`
	Cluster    string     `json:"cluster,omitempty"`
}

// build returns the request for e, or an error (wrapping ErrInvalid or naming the revision)
// when none can be sent.
func (t *target) build(e Event, now time.Time) (*request, error) {
	if e.Time.IsZero() {
		e.Time = now
	}
	if t.Cluster != "" {
		e.Cluster = t.Cluster
	}
	r := &request{url: t.url, header: http.Header{"Content-Type": {"application/json"}}}
	var body any
	var err error
	switch t.Type {
	case Generic, GenericHMAC:
		body = genericBody{e.Namespace, e.Name, e.Transition, e.Revision, e.Reason,
			truncate(e.Message, maxGenericMessage), e.Time.UTC(), e.Cluster}
	case Slack:
		body = slackBody(e, t.Channel)
	case MSTeams:
		body = teamsBody(e)
	case GitHub, GitLab, Gitea:
		body, err = t.commitStatus(r, e)
	}
	if err != nil {
		return nil, err
	}
	if r.body, err = json.Marshal(body); err != nil {
		return nil, fmt.Errorf("encode %s body: %w", t.Type, err)
	}
	t.authorize(r)
	return r, nil
}

// authorize sets the credentials each type documents.
func (t *target) authorize(r *request) {
	switch t.Type {
	case Generic, GenericHMAC:
		if t.Username != "" || t.Password != "" {
			req := http.Request{Header: r.header}
			req.SetBasicAuth(t.Username, t.Password)
		} else if t.Token != "" {
			r.header.Set("Authorization", "Bearer "+t.Token)
		}
		if t.Type == GenericHMAC {
			mac := hmac.New(sha256.New, t.HMACKey)
			mac.Write(r.body)
			r.header.Set("X-Signature", "sha256="+hex.EncodeToString(mac.Sum(nil)))
		}
	case Slack, GitHub:
		if t.Token != "" {
			r.header.Set("Authorization", "Bearer "+t.Token)
		}
	case GitLab:
		r.header.Set("PRIVATE-TOKEN", t.Token)
	case Gitea:
		r.header.Set("Authorization", "token "+t.Token)
	}
}

// statusContext is the commit status's context (GitHub, Gitea) or name (GitLab): one per
// cluster and Sync, so clusters and Syncs deploying one commit each keep their own.
func statusContext(e Event) string {
	return truncate(fmt.Sprintf("converge/%s/%s/%s", e.Cluster, e.Namespace, e.Name), maxContext)
}

// description is a commit status's one line: "failed: HealthCheckFailed: <message>".
func description(e Event, limit int) string {
	d := e.title()
	if e.Reason != "" {
		d += ": " + e.Reason
	}
	if e.Message != "" {
		d += ": " + strings.Join(strings.Fields(e.Message), " ")
	}
	return truncate(d, limit)
}

// commitStatus sets r's URL and returns the body of a commit status for e.
func (t *target) commitStatus(r *request, e Event) (any, error) {
	sha, err := CommitSHA(e.Revision)
	if err != nil {
		return nil, fmt.Errorf("%s provider %q: no commit status: %w", t.Type, t.Name, err)
	}
	if e.Cluster == "" {
		return nil, t.invalid("no cluster name to key the commit status with")
	}
	base := *t.url
	base.RawQuery, base.Fragment = "", ""
	// GitHub's public API lives on its own host; GitHub Enterprise Server, GitLab and Gitea
	// serve theirs under the repository's host.
	state := map[Type]map[Transition]string{
		GitHub: {BecameReady: "success", Failed: "failure", RolledBack: "failure", Drifted: "error"},
		GitLab: {BecameReady: "success", Failed: "failed", RolledBack: "failed", Drifted: "failed"},
		Gitea:  {BecameReady: "success", Failed: "failure", RolledBack: "failure", Drifted: "warning"},
	}[t.Type][e.Transition]
	if state == "" {
		return nil, t.invalid("transition %q has no commit status", e.Transition)
	}
	switch t.Type {
	case GitHub:
		api := "/api/v3"
		if base.Host == "github.com" {
			base.Host, api = "api.github.com", ""
		}
		setPath(&base, api+"/repos/"+t.repo[0]+"/"+t.repo[1]+"/statuses/"+sha, "")
		r.header.Set("Accept", "application/vnd.github+json")
		r.header.Set("X-GitHub-Api-Version", "2022-11-28")
		r.url = &base
		return map[string]string{"state": state, "context": statusContext(e), "description": description(e, maxGitHubDescription)}, nil
	case GitLab:
		project := strings.Join(t.repo, "/")
		setPath(&base, "/api/v4/projects/"+project+"/statuses/"+sha,
			"/api/v4/projects/"+url.PathEscape(project)+"/statuses/"+sha)
		r.url = &base
		return map[string]string{"state": state, "name": statusContext(e), "description": description(e, maxGitDescription)}, nil
	default: // Gitea
		setPath(&base, "/api/v1/repos/"+t.repo[0]+"/"+t.repo[1]+"/statuses/"+sha, "")
		r.url = &base
		return map[string]string{"state": state, "context": statusContext(e), "description": description(e, maxGitDescription)}, nil
	}
}

// setPath puts an API path on u. The repository address is "https://host/owner/repo", so
// the API is served from the host's root (a forge under a sub-path is not supported).
func setPath(u *url.URL, path, raw string) {
	u.Path, u.RawPath = path, raw
}
