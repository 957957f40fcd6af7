package sources

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestRenderMakesNoNetworkRequest names a URL in every field of a kustomization (and of a
// builtin plugin config) that kustomize loads: with remote bases off, the server must see
// no request, and the error must name the file and the field.
func TestRenderMakesNoNetworkRequest(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte(cm("fetched", "default")))
	}))
	defer srv.Close()
	u := srv.URL + "/x.yaml"
	const res = "resources: [cm.yaml]\n"
	tests := []struct {
		name  string
		files map[string]string
		want  string // file and field
	}{
		{name: "resources", files: map[string]string{"k/kustomization.yaml": "resources: [" + u + "]\n"}, want: "k/kustomization.yaml: resources[0]"},
		{name: "configMapGenerator files", files: map[string]string{"k/kustomization.yaml": res + "configMapGenerator: [{name: c, files: [" + u + "]}]\n"}, want: "k/kustomization.yaml: configMapGenerator[0].files[0]"},
		{name: "configMapGenerator files with a key", files: map[string]string{"k/kustomization.yaml": res + "configMapGenerator: [{name: c, files: [ok.yaml, key=" + u + "]}]\n"}, want: "configMapGenerator[0].files[1]"},
		{name: "configMapGenerator envs", files: map[string]string{"k/kustomization.yaml": res + "configMapGenerator: [{name: c, envs: [" + u + "]}]\n"}, want: "k/kustomization.yaml: configMapGenerator[0].envs[0]"},
		{name: "secretGenerator env", files: map[string]string{"k/kustomization.yaml": res + "secretGenerator: [{name: s, env: " + u + "}]\n"}, want: "k/kustomization.yaml: secretGenerator[0].env"},
		{name: "patches path", files: map[string]string{"k/kustomization.yaml": res + "patches: [{path: " + u + "}]\n"}, want: "k/kustomization.yaml: patches[0].path"},
		{name: "patchesStrategicMerge", files: map[string]string{"k/kustomization.yaml": res + "patchesStrategicMerge: [" + u + "]\n"}, want: "k/kustomization.yaml: patchesStrategicMerge[0]"},
		{name: "patchesJson6902 path", files: map[string]string{"k/kustomization.yaml": res + "patchesJson6902: [{target: {version: v1, kind: ConfigMap, name: a}, path: " + u + "}]\n"}, want: "k/kustomization.yaml: patchesJson6902[0].path"},
		{name: "replacements path", files: map[string]string{"k/kustomization.yaml": res + "replacements: [{path: " + u + "}]\n"}, want: "k/kustomization.yaml: replacements[0].path"},
		{name: "openapi path", files: map[string]string{"k/kustomization.yaml": res + "openapi: {path: " + u + "}\n"}, want: "k/kustomization.yaml: openapi.path"},
		{name: "crds", files: map[string]string{"k/kustomization.yaml": res + "crds: [" + u + "]\n"}, want: "k/kustomization.yaml: crds[0]"},
		{name: "configurations", files: map[string]string{"k/kustomization.yaml": res + "configurations: [" + u + "]\n"}, want: "k/kustomization.yaml: configurations[0]"},
		{name: "generators", files: map[string]string{"k/kustomization.yaml": res + "generators: [" + u + "]\n"}, want: "k/kustomization.yaml: generators[0]"},
		{name: "transformers", files: map[string]string{"k/kustomization.yaml": res + "transformers: [" + u + "]\n"}, want: "k/kustomization.yaml: transformers[0]"},
		{name: "validators", files: map[string]string{"k/kustomization.yaml": res + "validators: [" + u + "]\n"}, want: "k/kustomization.yaml: validators[0]"},
		{
			name: "plugin config file path",
			files: map[string]string{
				"k/kustomization.yaml": res + "transformers: [patch.yaml]\n",
				"k/patch.yaml":         "apiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: p}\npath: " + u + "\n",
			},
			want: "k/patch.yaml: path",
		},
		{
			name: "inline generator config files",
			files: map[string]string{
				"k/kustomization.yaml": res + "generators:\n- |\n  apiVersion: builtin\n  kind: ConfigMapGenerator\n  metadata: {name: g}\n  files: [" + u + "]\n",
			},
			want: "k/kustomization.yaml: generators[0]: files[0]",
		},
		{
			name: "a base's generator",
			files: map[string]string{
				"k/kustomization.yaml":    "resources: [../base]\n",
				"base/kustomization.yaml": res + "configMapGenerator: [{name: c, files: [" + u + "]}]\n",
				"base/cm.yaml":            cm("a", "default"),
			},
			want: "base/kustomization.yaml: configMapGenerator[0].files[0]",
		},
		{
			name: "a component's patch",
			files: map[string]string{
				"k/kustomization.yaml":    res + "components: [../comp]\n",
				"comp/kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\npatches: [{path: " + u + "}]\n",
			},
			want: "comp/kustomization.yaml: patches[0].path",
		},
		{
			// The scan does not follow plugin configs listed by a folder's kustomization:
			// only the child's transport stops this one.
			name: "plugin config in a transformers folder",
			files: map[string]string{
				"k/kustomization.yaml":         res + "transformers: [plugins]\n",
				"k/plugins/kustomization.yaml": "resources: [patch.yaml]\n",
				"k/plugins/patch.yaml":         "apiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: p}\npath: " + u + "\ntarget: {kind: ConfigMap}\n",
			},
			want: "k/plugins/patch.yaml: path",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.files["k/cm.yaml"] = cm("a", "default")
			tt.files["k/ok.yaml"] = "k: v\n"
			dir := writeTree(t, tt.files)
			before := hits.Load()
			opts := DefaultRenderOptions()
			opts.Isolate = true
			objs, err := Render(t.Context(), dir, "k", opts)
			if n := hits.Load() - before; n != 0 {
				t.Errorf("the render made %d HTTP requests", n)
			}
			if err == nil {
				t.Fatalf("Render returned %d objects and no error", len(objs))
			}
			if !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrRemoteBase) || !IsTerminal(err) {
				t.Errorf("error:\n%v\nwant a terminal ErrRemoteBase naming %q", err, tt.want)
			}
		})
	}
}

// TestIsolatedBuildTimesOutAndOthersProceed: a build that never returns (this test
// binary's render child never answers for a folder holding hangMarker) holds up no other
// render, and is stopped when its context ends. In-process (Isolate off, as every build
// was before), the second render waits behind the stuck one.
func TestIsolatedBuildTimesOutAndOthersProceed(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"stuck/kustomization.yaml": "resources: [cm.yaml]\n",
		"stuck/cm.yaml":            cm("stuck", "default"),
		"stuck/" + hangMarker:      "",
		"ok/kustomization.yaml":    "resources: [cm.yaml]\n",
		"ok/cm.yaml":               cm("ok", "default"),
	})
	opts := DefaultRenderOptions()
	opts.Isolate = true

	ctx, cancel := context.WithCancel(t.Context())
	stuck := make(chan error, 1)
	go func() {
		_, err := Render(ctx, dir, "stuck", opts)
		stuck <- err
	}()
	ok := make(chan error, 1)
	go func() {
		_, err := Render(t.Context(), dir, "ok", opts)
		ok <- err
	}()
	select {
	case err := <-ok:
		if err != nil {
			t.Fatalf("render of ok: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the render of ok waited for the stuck one")
	}
	select {
	case err := <-stuck:
		t.Fatalf("the stuck render returned: %v", err)
	default:
	}
	cancel()
	if err := <-stuck; !errors.Is(err, context.Canceled) {
		t.Errorf("stuck render after cancel: %v, want context.Canceled", err)
	}

	tctx, tcancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer tcancel()
	_, err := Render(tctx, dir, "stuck", opts)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "stuck/kustomization.yaml: kustomize build stopped") || IsTerminal(err) {
		t.Errorf("timed-out render: %v, want a transient DeadlineExceeded naming stuck/kustomization.yaml", err)
	}
}

// TestChildEnviron: a render child gets the few variables it needs, not the daemon's
// (kubeconfig, tokens, memory limit); PATH and git protocols are emptied without remote
// bases and kept with them.
func TestChildEnviron(t *testing.T) {
	for _, name := range append(childEnvKept, childEnvKeptRemote...) {
		t.Setenv(name, "") // restored after the test
		_ = os.Unsetenv(name)
	}
	t.Setenv("HOME", "/home/converge")
	t.Setenv("KUBECONFIG", "/etc/kubeconfig")
	t.Setenv("GITHUB_TOKEN", "secret")
	t.Setenv("GOMEMLIMIT", "64GiB")
	t.Setenv("PATH", "/usr/bin")
	t.Setenv("HTTPS_PROXY", "http://proxy")
	limits := Limits{MaxTotalSize: 1 << 20}
	tests := []struct {
		name        string
		allowRemote bool
		want        []string
	}{
		{name: "remote bases refused", want: []string{"HOME=/home/converge", childEnv + "=1", "GOMEMLIMIT=50331648", "PATH=", "GIT_ALLOW_PROTOCOL=converge-refuses-all"}},
		{name: "remote bases allowed", allowRemote: true, want: []string{"HOME=/home/converge", "PATH=/usr/bin", "HTTPS_PROXY=http://proxy", childEnv + "=1", "GOMEMLIMIT=50331648"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, childEnviron(tt.allowRemote, limits)); diff != "" {
				t.Errorf("childEnviron (-want +got):\n%s", diff)
			}
		})
	}
}
