// Package registry runs a real OCI registry for tests: Debian's docker-registry (CNCF
// distribution) on a free loopback port with its own storage folder, optionally behind
// htpasswd basic auth and TLS with a CA made for the test, and pushes artifacts to it in
// Flux's format with oras-go. Production code must not import it.
package registry

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// Binary is where Debian's docker-registry package installs the registry.
const Binary = "/usr/bin/docker-registry"

// Options select how the registry is served.
type Options struct {
	// Username and Password, if set, require htpasswd basic auth.
	Username, Password string
	// TLS serves HTTPS with a certificate of a CA made for the test (Registry.CA).
	TLS bool
}

// Registry is a running registry.
type Registry struct {
	// Host is "127.0.0.1:port".
	Host string
	// Storage is the registry's storage folder.
	Storage string
	// CA is the PEM certificate of the CA that signed the registry's certificate (TLS).
	CA   []byte
	opts Options
}

// Require returns the registry binary's path. Without it the test is skipped, unless CI is
// set: then it fails, since CI must install the package.
func Require(t testing.TB) string {
	t.Helper()
	for _, p := range []string{Binary, "docker-registry"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	if os.Getenv("CI") == "" {
		t.Skip("needs a real OCI registry: apt-get install docker-registry (" + Binary + "); required when CI is set")
	}
	t.Fatal("docker-registry is not installed (" + Binary + "); .ci/run must install the Debian package docker-registry")
	return ""
}

// Start runs a registry for the test and stops it when the test ends.
func Start(t testing.TB, opts Options) *Registry {
	t.Helper()
	bin := Require(t)
	dir := t.TempDir()
	r := &Registry{Storage: filepath.Join(dir, "storage"), opts: opts}
	port := freePort(t)
	r.Host = fmt.Sprintf("127.0.0.1:%d", port)
	cfg := fmt.Sprintf("version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: %s\n  delete:\n    enabled: true\nhttp:\n  addr: %s\n", r.Storage, r.Host)
	if opts.TLS {
		cert, key := r.makeCerts(t, dir)
		cfg += fmt.Sprintf("  tls:\n    certificate: %s\n    key: %s\n", cert, key)
	}
	if opts.Username != "" {
		hash, err := bcrypt.GenerateFromPassword([]byte(opts.Password), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		pw := filepath.Join(dir, "htpasswd")
		if err := os.WriteFile(pw, []byte(opts.Username+":"+string(hash)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg += fmt.Sprintf("auth:\n  htpasswd:\n    realm: test\n    path: %s\n", pw)
	}
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd := exec.Command(bin, "serve", cfgPath)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	r.waitReady(t, done, &out)
	return r
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitReady waits until /v2/ answers (200 or 401), at most 30 s.
func (r *Registry) waitReady(t testing.TB, done <-chan struct{}, out *bytes.Buffer) {
	t.Helper()
	c := r.HTTPClient()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			t.Fatalf("docker-registry exited: %s", out.String())
		default:
		}
		resp, err := c.Get(r.base() + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusUnauthorized {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("docker-registry not ready after 30 s: %s", out.String())
}

func (r *Registry) base() string {
	if r.opts.TLS {
		return "https://" + r.Host
	}
	return "http://" + r.Host
}

// HTTPClient trusts the registry's CA.
func (r *Registry) HTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	if r.CA != nil {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(r.CA)
		t.TLSClientConfig = &tls.Config{RootCAs: pool}
	}
	return &http.Client{Transport: t, Timeout: 30 * time.Second}
}

// URL is the artifact URL of repository repo: "oci://127.0.0.1:port/repo".
func (r *Registry) URL(repo string) string { return "oci://" + r.Host + "/" + repo }

// DockerConfig is a .dockerconfigjson for this registry with user and password.
func (r *Registry) DockerConfig(user, password string) []byte {
	a := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	return fmt.Appendf(nil, `{"auths":{%q:{"auth":%q}}}`, r.Host, a)
}

// makeCerts writes a CA (kept in r.CA) and a certificate it signed for 127.0.0.1.
func (r *Registry) makeCerts(t testing.TB, dir string) (certPath, keyPath string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test registry CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	r.CA = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	certPath, keyPath = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certPath, keyPath
}

// ctx bounds one push.
func pushContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}
