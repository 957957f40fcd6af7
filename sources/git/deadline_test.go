package git

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh/knownhosts"
)

// silentServer accepts connections, reads what the client sends and never answers, as a
// server that hangs after accept. It returns its address.
func silentServer(t *testing.T) string {
	t.Helper()
	return listen(t, func(conn net.Conn) { _, _ = io.Copy(io.Discard, conn) })
}

// slowProxy forwards connections to target, the answers one byte at a time every delay: a
// server that answers, too slowly to ever finish.
func slowProxy(t *testing.T, target string, delay time.Duration) string {
	t.Helper()
	return listen(t, func(conn net.Conn) {
		up, err := net.Dial("tcp", target)
		if err != nil {
			return
		}
		defer func() { _ = up.Close() }()
		go func() { _, _ = io.Copy(up, conn) }()
		var b [1]byte
		for {
			if _, err := up.Read(b[:]); err != nil {
				return
			}
			time.Sleep(delay)
			if _, err := conn.Write(b[:]); err != nil {
				return
			}
		}
	})
}

// listen serves each connection of a loopback listener with serve, and closes them all at
// the end of the test.
func listen(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
			wg.Go(func() {
				defer func() { _ = conn.Close() }()
				serve(conn)
			})
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// fetchWithin runs a fetch with a timeout and returns its error, failing the test when the
// fetch is still running well after the timeout.
func fetchWithin(t *testing.T, f *Fetcher, ctx context.Context, repo Repository, timeout time.Duration) error {
	t.Helper()
	opts := loopbackOptions()
	opts.Timeout = timeout
	done := make(chan error, 1)
	go func() {
		_, err := f.Fetch(ctx, repo, opts)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(timeout + 20*time.Second):
		t.Fatalf("fetch of %s still running 20s after its %s deadline", repo.URL, timeout)
		return nil
	}
}

// TestFetchDeadline: a server that accepts and never answers, or answers one byte at a
// time, over SSH and HTTP, costs a fetch its timeout and no more, with an error naming the
// deadline; the fetch lock is free again afterwards.
func TestFetchDeadline(t *testing.T) {
	r := newTestRepo(t)
	r.commit("one", map[string]string{"v.txt": strings.Repeat("x", 64<<10)})
	r.push()
	srv := serveSSH(t, r.root)
	httpURL, _ := serveHTTP(t, r.root, nil)
	httpAddr := strings.TrimSuffix(strings.TrimPrefix(httpURL, "http://"), "/repo.git")
	sshAuth := func(addr string) Auth {
		line := knownhosts.Line([]string{addr}, srv.hostKey.PublicKey())
		return Auth{SSHPrivateKey: srv.clientKey, SSHKnownHosts: []byte(line + "\n")}
	}
	silent := silentServer(t)
	slowSSH := slowProxy(t, srv.addr, 5*time.Millisecond)
	slowHTTP := slowProxy(t, httpAddr, 5*time.Millisecond)
	tests := []struct {
		name string
		repo Repository
		want string
	}{
		{"ssh silent", Repository{URL: "ssh://git@" + silent + "/repo.git", Auth: sshAuth(silent)}, "no answer within 2s"},
		{"http silent", Repository{URL: "http://" + silent + "/repo.git"}, "no answer within 2s"},
		{"ssh trickle", Repository{URL: "ssh://git@" + slowSSH + "/repo.git", Auth: sshAuth(slowSSH)}, "not finished within 2s"},
		{"http trickle", Repository{URL: "http://" + slowHTTP + "/repo.git"}, "not finished within 2s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := NewFetcher(t.TempDir())
			err := fetchWithin(t, f, t.Context(), tt.repo, 2*time.Second)
			var de *DeadlineError
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.As(err, &de) ||
				!strings.Contains(err.Error(), "fetch "+tt.repo.URL) {
				t.Fatalf("Fetch error %v, want a DeadlineError naming the url and %q", err, tt.want)
			}
			if IsTerminal(err) {
				t.Errorf("a deadline is terminal: %v", err)
			}
			// The lock of that cache is free: a fetch of a healthy server goes through.
			key, err := f.cacheKey(tt.repo)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			unlock, err := f.lock(ctx, key, nil)
			if err != nil {
				t.Fatalf("cache lock still held after the fetch returned: %v", err)
			}
			unlock()
		})
	}
}

// TestFetchWaitingForLockEnds: a second fetch of the same cache, waiting for a first one
// that hangs, gives up when its own ctx ends, and the first one ends at its deadline.
func TestFetchWaitingForLockEnds(t *testing.T) {
	silent := silentServer(t)
	repo := Repository{URL: "http://" + silent + "/repo.git"}
	f := NewFetcher(t.TempDir())
	first := make(chan error, 1)
	go func() {
		opts := loopbackOptions()
		opts.Timeout = 5 * time.Second
		_, err := f.Fetch(t.Context(), repo, opts)
		first <- err
	}()
	time.Sleep(500 * time.Millisecond) // the first fetch holds the lock
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(500*time.Millisecond, cancel)
	err := fetchWithin(t, f, ctx, repo, time.Minute)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "another fetch of the same url") {
		t.Fatalf("second Fetch error %v, want it canceled while waiting for the first", err)
	}
	select {
	case err := <-first:
		if err == nil || !strings.Contains(err.Error(), "no answer within 5s") {
			t.Fatalf("first Fetch error %v, want no answer within 5s", err)
		}
	case <-time.After(25 * time.Second):
		t.Fatal("first fetch still running 20s after its 5s deadline")
	}
}
