package oci

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/converge-dev/converge/e2e/registry"
)

// TestFetchCacheKeyedByRegistryAndCredentials: tenant A fetches a private artifact with its
// credentials; tenant B, without credentials, points its Sync at a registry of its own that
// merely claims (HEAD) to hold A's manifest digest, and gets nothing from the cache: a
// folder is named by the registry, repository and credentials it was read with (I13).
// Without it: the folder was named by the manifest digest alone, and B was served A's
// extracted files.
func TestFetchCacheKeyedByRegistryAndCredentials(t *testing.T) {
	reg := registry.Start(t, registry.Options{Username: "alice", Password: "s3cret"})
	d := reg.PushFiles(t, "team-a/private", "v1", map[string]string{"secret.yaml": "kind: ConfigMap\ndata: {token: TOP-SECRET}\n"})

	f := NewFetcher(t.TempDir())
	ctx := context.Background()
	resA, err := f.Fetch(ctx, Artifact{URL: reg.URL("team-a/private"), Ref: Ref{Tag: "v1"}, Insecure: true,
		Auth: Auth{DockerConfigJSON: reg.DockerConfig("alice", "s3cret")}}, localOptions())
	if err != nil {
		t.Fatal(err)
	}
	_ = resA

	// Tenant B's registry: knows only the digest, holds nothing.
	liar := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead && strings.Contains(r.URL.Path, "/manifests/") {
			w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
			w.Header().Set("Docker-Content-Digest", d.String())
			w.Header().Set("Content-Length", "500")
			return
		}
		http.NotFound(w, r)
	}))
	defer liar.Close()
	urlB := "oci://" + strings.TrimPrefix(liar.URL, "http://") + "/team-b/anything"
	resB, err := f.Fetch(ctx, Artifact{URL: urlB, Ref: Ref{Tag: "latest"}, Insecure: true}, localOptions())
	if err != nil {
		return // the liar's registry holds no manifest to download
	}
	t.Errorf("tenant B without credentials, from a registry holding nothing, was served %s: secret.yaml = %q",
		resB.Dir, readFile(t, resB.Dir, "secret.yaml"))
}
