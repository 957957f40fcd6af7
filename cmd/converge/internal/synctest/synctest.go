// Package synctest holds the test helpers that the CLI verbs' tests and the daemon's tests
// share: a git folder to publish from, Syncs created and awaited on a real API server,
// objects for the engine, and the YAML both sets of tests apply. Only tests import it.
package synctest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// ConfigMapA (VERSION is its data's version) and ConfigMapB are two ConfigMaps in NS.
const (
	ConfigMapA = `apiVersion: v1
kind: ConfigMap
metadata: {name: a, namespace: NS}
data: {version: "VERSION"}
`
	ConfigMapB = `apiVersion: v1
kind: ConfigMap
metadata: {name: b, namespace: NS}
data: {k: v}
`
)

// WidgetCRD is a namespaced CRD, and Widget one of its resources in NS.
const (
	WidgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.cli.converge.dev}
spec:
  group: cli.converge.dev
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: integer}}}
`
	Widget = `apiVersion: cli.converge.dev/v1
kind: Widget
metadata: {name: w, namespace: NS}
spec: {size: 1}
`
)

// Publisher commits a folder to a branch of a repository (e2e/gitserver.Server does).
type Publisher interface {
	Publish(repo, branch, dir, message string) (string, error)
}

// Publish writes files (name → content with NS replaced by ns, "" deletes) into the folder
// src, commits it as branch main of repository "app" and returns the revision.
func Publish(t *testing.T, git Publisher, src, ns string, files map[string]string) string {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(src, name)
		if content == "" {
			_ = os.Remove(p)
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(strings.ReplaceAll(content, "NS", ns)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sha, err := git.Publish("app", "main", src, "test commit")
	if err != nil {
		t.Fatal(err)
	}
	return "main@sha1:" + sha
}

// NewSync is the Sync "app" in ns of the repository at url, branch main, with prune and
// wait, changed by mutate.
func NewSync(ns, url string, interval time.Duration, mutate ...func(*v1alpha1.Sync)) *v1alpha1.Sync {
	s := &v1alpha1.Sync{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns},
		Spec: v1alpha1.SyncSpec{
			Source:   v1alpha1.Source{Git: &v1alpha1.GitSource{URL: url, Ref: v1alpha1.GitRef{Branch: "main"}}},
			Path:     ".",
			Interval: metav1.Duration{Duration: interval},
			Prune:    true,
			Wait:     true,
			Timeout:  &metav1.Duration{Duration: 30 * time.Second},
		},
	}
	for _, m := range mutate {
		m(s)
	}
	return s
}

// Create creates s, again until the API server knows Syncs (a daemon installs the CRD).
func Create(t *testing.T, c client.Client, s *v1alpha1.Sync) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := c.Create(ctx, s)
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("create Sync: %v", err)
	}
}

// Wait polls the Sync key until cond holds, failing with its last status otherwise.
func Wait(t *testing.T, c client.Client, key client.ObjectKey, what string, cond func(*v1alpha1.Sync) bool) *v1alpha1.Sync {
	t.Helper()
	s := &v1alpha1.Sync{}
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, s); err != nil {
			return false, nil
		}
		return cond(s), nil
	})
	if err != nil {
		t.Fatalf("Sync never %s; generation %d, status %+v", what, s.Generation, s.Status)
	}
	return s
}

// ReadyAt holds when the Sync observed its generation and is Ready at revision rev.
func ReadyAt(rev string) func(*v1alpha1.Sync) bool {
	return func(s *v1alpha1.Sync) bool {
		return s.Status.ObservedGeneration == s.Generation && s.Status.LastAppliedRevision == rev &&
			meta.IsStatusConditionTrue(s.Status.Conditions, v1alpha1.ConditionReady)
	}
}

// Objects parses YAML documents (NS is the namespace) into objects for the engine.
func Objects(t *testing.T, ns string, docs ...string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, d := range docs {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(strings.ReplaceAll(d, "NS", ns)), &u.Object); err != nil {
			t.Fatal(err)
		}
		out = append(out, u)
	}
	return out
}

// Engine is a one-shot engine on cfg, as the CLI builds.
func Engine(t *testing.T, cfg *rest.Config) *engine.Engine {
	t.Helper()
	eng, err := engine.New(cfg, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

// QuickApply is an engine apply with prune and without the readiness wait.
func QuickApply() engine.ApplyOptions {
	opts := engine.DefaultApplyOptions()
	opts.Wait = false
	return opts
}

// CountingServer serves body to every request and counts them, so a test can check that
// a render made none.
func CountingServer(t *testing.T, body string) (url string, hits *atomic.Int64) {
	hits = new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv.URL, hits
}
