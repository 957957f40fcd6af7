// Package gitserver serves git repositories over smart HTTP on loopback with the real
// `git http-backend` behind net/http/cgi, and publishes folders as commits. Tests and
// `make run` use it as the git server; production code must not import it.
package gitserver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Server serves every bare repository under Root at URL/<name>.git.
type Server struct {
	// Root holds the bare repositories.
	Root string
	// URL is the base URL, e.g. http://127.0.0.1:41234.
	URL string
	// SigningKey, when set, is the path of an SSH private key Publish signs its commits
	// with (git's gpg.format=ssh), as a developer with commit signing on does.
	SigningKey string

	srv *http.Server
}

// Start serves root on a free loopback port (addr "127.0.0.1:0") or addr.
func Start(root, addr string) (*Server, error) {
	backend, err := httpBackend()
	if err != nil {
		return nil, err
	}
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	h := &cgi.Handler{
		Path: backend,
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1"},
	}
	s := &Server{Root: root, URL: "http://" + l.Addr().String(), srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}}
	go func() { _ = s.srv.Serve(l) }()
	return s, nil
}

// Close stops serving.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.srv.Shutdown(ctx)
}

// RepoURL is the clone URL of the repository name.
func (s *Server) RepoURL(name string) string { return s.URL + "/" + name + ".git" }

// Publish replaces the content of branch in repository name (created if missing) with the
// files of dir and commits it with message. It returns the commit SHA.
func (s *Server) Publish(name, branch, dir, message string) (string, error) {
	bare := filepath.Join(s.Root, name+".git")
	if _, err := os.Stat(bare); errors.Is(err, fs.ErrNotExist) {
		if _, err := git(s.Root, "init", "-q", "--bare", "-b", branch, bare); err != nil {
			return "", err
		}
	}
	work, err := os.MkdirTemp("", "converge-publish-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	if err := os.CopyFS(work, os.DirFS(dir)); err != nil {
		return "", fmt.Errorf("copy %s: %w", dir, err)
	}
	if _, err := git(work, "init", "-q", "-b", branch); err != nil {
		return "", err
	}
	// Build on the branch's current head, if any, so history is linear: the index starts
	// empty and `add -A` stages exactly dir, deletions included.
	if _, err := git(work, "fetch", "-q", bare, branch); err == nil {
		if _, err := git(work, "reset", "-q", "--soft", "FETCH_HEAD"); err != nil {
			return "", err
		}
	}
	commit := []string{"commit", "-q", "--allow-empty", "-m", message}
	if s.SigningKey != "" {
		commit = append([]string{"-c", "gpg.format=ssh", "-c", "user.signingkey=" + s.SigningKey}, append(commit, "-S")...)
	}
	steps := [][]string{
		{"add", "-A"},
		commit,
		{"push", "-q", bare, "HEAD:refs/heads/" + branch},
	}
	for _, args := range steps {
		if _, err := git(work, args...); err != nil {
			return "", err
		}
	}
	return git(work, "rev-parse", "HEAD")
}

// git runs the git CLI isolated from the user's configuration.
func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=converge", "GIT_AUTHOR_EMAIL=converge@localhost",
		"GIT_COMMITTER_NAME=converge", "GIT_COMMITTER_EMAIL=converge@localhost")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// httpBackend finds git-http-backend in git's exec path.
func httpBackend() (string, error) {
	out, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		return "", fmt.Errorf("git --exec-path: %w (is git installed?)", err)
	}
	p := filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("git-http-backend not found: %w", err)
	}
	return p, nil
}
