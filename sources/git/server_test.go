package git

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// gitEnv isolates the git CLI from the machine's configuration and fixes identities and
// dates so that tests are reproducible.
func gitEnv(home string) []string {
	return append(os.Environ(),
		"HOME="+home,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=Test", "GIT_AUTHOR_EMAIL=test@example.com",
		"GIT_COMMITTER_NAME=Test", "GIT_COMMITTER_EMAIL=test@example.com",
		"GIT_AUTHOR_DATE=2024-01-02T03:04:05Z", "GIT_COMMITTER_DATE=2024-01-02T03:04:05Z",
	)
}

// testRepo is a working repository pushing to a bare repository that test servers serve.
type testRepo struct {
	t    *testing.T
	work string
	// root holds the bare repository "repo.git"; servers use it as their project root.
	root string
	bare string
}

func newTestRepo(t *testing.T) *testRepo {
	t.Helper()
	base := t.TempDir()
	r := &testRepo{t: t, work: filepath.Join(base, "work"), root: filepath.Join(base, "srv")}
	r.bare = filepath.Join(r.root, "repo.git")
	r.run(base, "init", "-q", "--bare", "-b", "main", r.bare)
	r.run(base, "init", "-q", "-b", "main", r.work)
	r.git("remote", "add", "origin", r.bare)
	return r
}

func (r *testRepo) run(dir string, args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = gitEnv(r.t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func (r *testRepo) git(args ...string) string {
	r.t.Helper()
	return r.run(r.work, args...)
}

// bareConfig sets a config key on the served repository.
func (r *testRepo) bareConfig(key, value string) {
	r.t.Helper()
	r.run(r.bare, "config", key, value)
}

// commit writes files, commits them and returns the commit SHA.
func (r *testRepo) commit(msg string, files map[string]string) string {
	r.t.Helper()
	for name, content := range files {
		path := filepath.Join(r.work, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			r.t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			r.t.Fatal(err)
		}
	}
	r.git("add", "-A")
	r.git("commit", "-q", "--allow-empty", "-m", msg)
	return r.git("rev-parse", "HEAD")
}

// push force-pushes all branches and tags.
func (r *testRepo) push() {
	r.t.Helper()
	r.git("push", "-q", "--force", "--all", "origin")
	r.git("push", "-q", "--force", "--tags", "origin")
}

// requestLog records "METHOD path" of every request a test HTTP server handled.
type requestLog struct {
	mu   sync.Mutex
	reqs []string
}

func (l *requestLog) add(r *http.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reqs = append(l.reqs, r.Method+" "+r.URL.Path)
}

// take returns the recorded requests and clears the log.
func (l *requestLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.reqs
	l.reqs = nil
	return out
}

// httpCreds, when set, makes the test HTTP server require basic auth or a bearer token.
type httpCreds struct {
	user, password, token string
	// revoked, once set, makes the server refuse every request, as a rotated password does.
	revoked atomic.Bool
}

// serveHTTP serves root with the real git http-backend over loopback and returns the URL
// of root/repo.git.
func serveHTTP(t *testing.T, root string, creds *httpCreds) (string, *requestLog) {
	t.Helper()
	backend := gitBackend(t, root)
	log := &requestLog{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.add(r)
		if creds != nil && !authorized(r, creds) {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		backend.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/repo.git", log
}

// gitBackend is git-http-backend serving the repositories under root.
func gitBackend(t *testing.T, root string) *cgi.Handler {
	t.Helper()
	execPath, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatalf("git --exec-path: %v", err)
	}
	return &cgi.Handler{
		Path: filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend"),
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"},
	}
}

func authorized(r *http.Request, c *httpCreds) bool {
	if c.revoked.Load() {
		return false
	}
	if c.token != "" && r.Header.Get("Authorization") == "Bearer "+c.token {
		return true
	}
	user, password, ok := r.BasicAuth()
	return ok && c.user != "" && user == c.user && password == c.password
}

// sshServer is a loopback SSH server that accepts one client key and runs git-upload-pack.
type sshServer struct {
	addr       string
	hostKey    ssh.Signer
	clientKey  []byte // PEM private key the server accepts
	knownHosts []byte // known_hosts content naming addr and hostKey
}

func newSigner(t *testing.T) (ssh.Signer, []byte) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	return signer, pem.EncodeToMemory(block)
}

// serveSSH serves root over SSH on loopback; the repository URL is
// ssh://git@<addr>/repo.git.
func serveSSH(t *testing.T, root string) *sshServer {
	t.Helper()
	hostKey, _ := newSigner(t)
	client, clientPEM := newSigner(t)
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(_ ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if bytes.Equal(key.Marshal(), client.PublicKey().Marshal()) {
				return nil, nil
			}
			return nil, fmt.Errorf("unknown public key")
		},
	}
	cfg.AddHostKey(hostKey)
	addr := listen(t, func(conn net.Conn) { serveSSHConn(t, conn, cfg, root) })
	line := knownhosts.Line([]string{addr}, hostKey.PublicKey())
	return &sshServer{addr: addr, hostKey: hostKey, clientKey: clientPEM, knownHosts: []byte(line + "\n")}
}

func serveSSHConn(t *testing.T, conn net.Conn, cfg *ssh.ServerConfig, root string) {
	defer func() { _ = conn.Close() }()
	_, chans, reqs, err := ssh.NewServerConn(conn, cfg)
	if err != nil {
		return // failed handshakes are what some tests check
	}
	go ssh.DiscardRequests(reqs)
	var sessions sync.WaitGroup
	defer sessions.Wait()
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "session only")
			continue
		}
		ch, chReqs, err := nc.Accept()
		if err != nil {
			return
		}
		sessions.Go(func() { serveSession(t, ch, chReqs, root) })
	}
}

// serveSession handles one "exec git-upload-pack '<path>'" request and replies with the
// command's exit status, as sshd does.
func serveSession(t *testing.T, ch ssh.Channel, reqs <-chan *ssh.Request, root string) {
	defer func() { _ = ch.Close() }()
	for req := range reqs {
		if req.Type != "exec" {
			_ = req.Reply(req.Type == "env", nil)
			continue
		}
		var payload struct{ Command string }
		if err := ssh.Unmarshal(req.Payload, &payload); err != nil {
			_ = req.Reply(false, nil)
			return
		}
		verb, arg, _ := strings.Cut(payload.Command, " ")
		if verb != "git-upload-pack" {
			_ = req.Reply(false, nil)
			return
		}
		path := filepath.Join(root, filepath.Clean("/"+strings.Trim(arg, "'")))
		_ = req.Reply(true, nil)
		cmd := exec.Command("git", "upload-pack", path)
		cmd.Env = gitEnv(root)
		cmd.Stdout, cmd.Stderr = ch, ch.Stderr()
		// Copy stdin by hand: exec's own copy would wait for the client to close its side,
		// while the client waits for the exit status.
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return
		}
		go func() {
			_, _ = io.Copy(stdin, ch)
			_ = stdin.Close() // the client went away: end upload-pack, which would wait for more
		}()
		status := uint32(0)
		if err := cmd.Run(); err != nil {
			t.Logf("ssh server: git upload-pack: %v", err)
			status = 1
		}
		_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{status}))
		return
	}
}

type sshPublicKey = ssh.PublicKey

func marshalAuthorizedKey(k ssh.PublicKey) []byte { return ssh.MarshalAuthorizedKey(k) }
