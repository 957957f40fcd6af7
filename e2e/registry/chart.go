package registry

import (
	"testing"

	"github.com/opencontainers/go-digest"
	helmregistry "helm.sh/helm/v3/pkg/registry"
)

// PushChart pushes a packaged chart (its version is the tag) with Helm's own registry
// client, as `helm push chart.tgz oci://host/<repo>` does, to <repo>/<chart name>, and
// returns the manifest digest.
func (r *Registry) PushChart(t testing.TB, repo, chartName, version string, archive []byte) digest.Digest {
	t.Helper()
	opts := []helmregistry.ClientOption{helmregistry.ClientOptHTTPClient(r.HTTPClient())}
	if !r.opts.TLS {
		opts = append(opts, helmregistry.ClientOptPlainHTTP())
	}
	if r.opts.Username != "" {
		opts = append(opts, helmregistry.ClientOptBasicAuth(r.opts.Username, r.opts.Password))
	}
	c, err := helmregistry.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Push(archive, r.Host+"/"+repo+"/"+chartName+":"+version)
	if err != nil {
		t.Fatalf("helm push %s/%s:%s: %v", repo, chartName, version, err)
	}
	return digest.Digest(res.Manifest.Digest)
}
