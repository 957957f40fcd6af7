package sources

import (
	"errors"
	"testing"

	"github.com/converge-dev/converge/e2e/registry"
	"github.com/converge-dev/converge/sources/oci"
)

// TestLoadOCI: an OCI artifact renders like a git checkout (a kustomization at the path,
// in the isolated child), at Flux's revision; a file over the render's --max-file-size is
// refused at extraction, terminal, and a registry on loopback is refused without AllowLocal.
func TestLoadOCI(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	d := reg.PushFiles(t, "app", "v1", map[string]string{
		"deploy/kustomization.yaml": "resources: [cm.yaml]\nnamePrefix: p-\n",
		"deploy/cm.yaml":            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\n",
	})
	l := NewLoader(t.TempDir())
	opts := DefaultLoadOptions()
	opts.OCI.AllowLocal = true
	opts.Render.Isolate = true
	src := Source{OCI: oci.Artifact{URL: reg.URL("app"), Ref: oci.Ref{Tag: "v1"}, Insecure: true}, Path: "deploy"}
	b, err := l.Load(t.Context(), src, opts)
	if err != nil {
		t.Fatal(err)
	}
	if b.Revision != "v1@"+d.String() || len(b.Objects) != 1 || b.Objects[0].GetName() != "p-cm" {
		t.Fatalf("revision %q, %d objects; want v1@%s and p-cm", b.Revision, len(b.Objects), d)
	}

	reg.PushFiles(t, "app", "big", map[string]string{"deploy/cm.yaml": string(make([]byte, 2<<20))})
	small := opts
	small.Render.Limits.MaxFileSize = 1 << 20
	small.OCI.MaxFileSize = 1 << 20
	src.OCI.Ref.Tag = "big"
	if _, err := l.Load(t.Context(), src, small); !errors.Is(err, oci.ErrTooLarge) || !IsTerminal(err) {
		t.Errorf("a file over --max-file-size: %v, want a terminal oci.ErrTooLarge", err)
	}
	src.OCI.Ref.Tag = "v1"
	if _, err := l.Load(t.Context(), src, DefaultLoadOptions()); !errors.Is(err, oci.ErrLocal) || !IsTerminal(err) {
		t.Errorf("a loopback registry with the default options: %v, want a terminal oci.ErrLocal", err)
	}
}
