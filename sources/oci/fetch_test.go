package oci

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/converge-dev/converge/e2e/registry"
)

// localOptions are the default options with local registries allowed: the test registry
// listens on loopback.
func localOptions() FetchOptions {
	o := DefaultFetchOptions()
	o.AllowLocal = true
	return o
}

func readFile(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// counter is a reverse proxy in front of a registry that counts the requests it forwards.
type counter struct {
	mu   sync.Mutex
	reqs []string
	srv  *httptest.Server
}

func countRequests(t *testing.T, r *registry.Registry) *counter {
	c := &counter{}
	target, _ := url.Parse("http://" + r.Host)
	proxy := httputil.NewSingleHostReverseProxy(target)
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		c.mu.Lock()
		c.reqs = append(c.reqs, req.Method+" "+req.URL.Path)
		c.mu.Unlock()
		proxy.ServeHTTP(w, req)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *counter) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.reqs
	c.reqs = nil
	return r
}

// TestFetchFluxArtifact: an artifact pushed in Flux's format is extracted by tag, digest
// and semver range with Flux's revision strings, and a fetch of a cached digest costs one
// HEAD of the manifest and no download.
func TestFetchFluxArtifact(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	files := map[string]string{"app/deploy.yaml": "kind: ConfigMap\n", "README.md": "hi"}
	d1 := reg.PushFiles(t, "team/app", "1.0.0", files)
	d2 := reg.PushFiles(t, "team/app", "1.2.0", map[string]string{"app/deploy.yaml": "v: 2\n"})
	reg.PushFiles(t, "team/app", "2.0.0", map[string]string{"app/deploy.yaml": "v: 3\n"})
	reg.PushFiles(t, "team/app", "not-semver", map[string]string{"x": "y"})
	c := countRequests(t, reg)
	proxied := "oci://" + strings.TrimPrefix(c.srv.URL, "http://") + "/team/app"

	f := NewFetcher(t.TempDir())
	tests := []struct {
		name    string
		ref     Ref
		wantRev string
		want    string
	}{
		{"tag", Ref{Tag: "1.0.0"}, "1.0.0@" + d1.String(), "kind: ConfigMap\n"},
		{"digest", Ref{Digest: d1.String()}, d1.String(), "kind: ConfigMap\n"},
		{"semver", Ref{SemVer: ">=1.0.0 <2.0.0"}, "1.2.0@" + d2.String(), "v: 2\n"},
	}
	for _, tt := range tests {
		res, err := f.Fetch(t.Context(), Artifact{URL: proxied, Ref: tt.ref, Insecure: true}, localOptions())
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if res.Revision != tt.wantRev {
			t.Errorf("%s: revision %q, want %q", tt.name, res.Revision, tt.wantRev)
		}
		if got := readFile(t, res.Dir, "app/deploy.yaml"); got != tt.want {
			t.Errorf("%s: app/deploy.yaml = %q, want %q", tt.name, got, tt.want)
		}
	}
	if got := f.Stats().Downloads; got != 2 {
		t.Errorf("downloads = %d, want 2 (the digest fetch reuses the tag's)", got)
	}
	c.take()
	if _, err := f.Fetch(t.Context(), Artifact{URL: proxied, Ref: Ref{Tag: "1.0.0"}, Insecure: true}, localOptions()); err != nil {
		t.Fatal(err)
	}
	if got := c.take(); len(got) != 1 || got[0] != "HEAD /v2/team/app/manifests/1.0.0" {
		t.Errorf("a fetch of a cached tag sent %q, want one HEAD of its manifest", got)
	}
}

// TestFetchAuthAndTLS: a registry behind htpasswd basic auth and TLS with its own CA is
// read with a .dockerconfigjson and the CA; wrong credentials and a missing CA fail,
// naming the artifact.
func TestFetchAuthAndTLS(t *testing.T) {
	reg := registry.Start(t, registry.Options{Username: "alice", Password: "s3cret", TLS: true})
	reg.PushFiles(t, "private/app", "v1", map[string]string{"cm.yaml": "kind: ConfigMap\n"})
	f := NewFetcher(t.TempDir())
	a := Artifact{URL: reg.URL("private/app"), Ref: Ref{Tag: "v1"}, Auth: Auth{DockerConfigJSON: reg.DockerConfig("alice", "s3cret"), CA: reg.CA}}
	res, err := f.Fetch(t.Context(), a, localOptions())
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, res.Dir, "cm.yaml"); got != "kind: ConfigMap\n" {
		t.Errorf("cm.yaml = %q", got)
	}

	wrong := a
	wrong.Auth.DockerConfigJSON = reg.DockerConfig("alice", "wrong")
	_, err = f.Fetch(t.Context(), wrong, localOptions())
	if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), a.String()) || !strings.Contains(err.Error(), "secretRef") {
		t.Errorf("wrong password: %v, want ErrAuth naming %s and secretRef", err, a)
	}
	anon := a
	anon.Auth.DockerConfigJSON = nil
	if _, err := f.Fetch(t.Context(), anon, localOptions()); !errors.Is(err, ErrAuth) {
		t.Errorf("no credentials for a cached digest: %v, want ErrAuth (the cache is not served without the registry's consent)", err)
	}
	noCA := a
	noCA.Auth.CA = nil
	if _, err := f.Fetch(t.Context(), noCA, localOptions()); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("without the CA: %v, want a certificate error", err)
	}
}

// TestFetchCachedTagWithAuthIsOneRequest: behind basic auth, a fetch of a cached tag with
// the same credentials is one HEAD (the auth scheme is remembered per credential), and
// other credentials do not inherit it.
func TestFetchCachedTagWithAuthIsOneRequest(t *testing.T) {
	reg := registry.Start(t, registry.Options{Username: "u", Password: "p"})
	reg.PushFiles(t, "app", "v1", map[string]string{"f.yaml": "x"})
	c := countRequests(t, reg)
	host := strings.TrimPrefix(c.srv.URL, "http://")
	cfg := func(pw string) []byte {
		return []byte(`{"auths":{"` + host + `":{"username":"u","password":"` + pw + `"}}}`)
	}
	f := NewFetcher(t.TempDir())
	a := Artifact{URL: "oci://" + host + "/app", Ref: Ref{Tag: "v1"}, Insecure: true, Auth: Auth{DockerConfigJSON: cfg("p")}}
	for range 2 {
		if _, err := f.Fetch(t.Context(), a, localOptions()); err != nil {
			t.Fatal(err)
		}
	}
	c.take()
	if _, err := f.Fetch(t.Context(), a, localOptions()); err != nil {
		t.Fatal(err)
	}
	if got := c.take(); len(got) != 1 || got[0] != "HEAD /v2/app/manifests/v1" {
		t.Errorf("a fetch of a cached tag behind basic auth sent %q, want one HEAD", got)
	}
	wrong := a
	wrong.Auth.DockerConfigJSON = cfg("wrong")
	if _, err := f.Fetch(t.Context(), wrong, localOptions()); !errors.Is(err, ErrAuth) {
		t.Errorf("other credentials: %v, want ErrAuth", err)
	}
}
