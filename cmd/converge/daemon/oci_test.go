package daemon

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opencontainers/go-digest"

	"github.com/converge-dev/converge/e2e/registry"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// TestDaemonAppliesOCIArtifact: a Sync from an artifact in a registry behind basic auth and
// TLS (credentials and CA from Secrets read as the Sync's identity) is applied at Flux's
// revision; a new tag within its semver range is applied and what left it pruned; a
// tampered artifact and a missing tag make it Ready=False FetchFailed naming the artifact,
// with the last applied revision and its objects kept (I8).
func TestDaemonAppliesOCIArtifact(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	reg := registry.Start(t, registry.Options{Username: "puller", Password: "pw", TLS: true})
	files := func(version string, withB bool) map[string]string {
		m := map[string]string{"deploy/a.yaml": strings.ReplaceAll(strings.Replace(cmA, "VERSION", version, 1), "NS", f.ns), "README.md": "not rendered"}
		if withB {
			m["deploy/b.yaml"] = strings.ReplaceAll(cmB, "NS", f.ns)
		}
		return m
	}
	d1 := reg.PushFiles(t, "team/app", "1.0.0", files("1", true))
	for _, sec := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "regcred"}, Type: corev1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{corev1.DockerConfigJsonKey: reg.DockerConfig("puller", "pw")}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "regca"}, Data: map[string][]byte{"ca.crt": reg.CA}},
	} {
		if err := f.c.Create(ctx, sec); err != nil {
			t.Fatal(err)
		}
	}
	f.startDaemon(env.Config) // AllowLocalGit: the registry listens on loopback
	f.createSync(2*time.Second, func(s *v1alpha1.Sync) {
		s.Spec.Source = v1alpha1.Source{OCI: &v1alpha1.OCISource{URL: reg.URL("team/app"), Ref: v1alpha1.OCIRef{SemVer: ">=1.0.0 <2.0.0"},
			SecretRef: &v1alpha1.LocalObjectReference{Name: "regcred"}, CertSecretRef: &v1alpha1.LocalObjectReference{Name: "regca"}}}
		s.Spec.Path = "deploy"
	})
	f.waitSync("Ready at 1.0.0", readyAt("1.0.0@"+d1.String()))

	d2 := reg.PushFiles(t, "team/app", "1.1.0", files("2", false))
	rev2 := "1.1.0@" + d2.String()
	f.waitSync("Ready at 1.1.0", readyAt(rev2))
	if cm, err := f.configMap("a"); err != nil || cm.Data["version"] != "2" {
		t.Errorf("configmap a = %v, %v; want version 2", cm.Data, err)
	}
	if _, err := f.configMap("b"); !apierrors.IsNotFound(err) {
		t.Errorf("configmap b, gone from 1.1.0, was not pruned: %v", err)
	}

	// 2.0.0's layer is changed in the registry's storage, its length kept: only the digest
	// check tells. Then a tag that does not exist.
	layer := registry.Tarball(t, files("3", false))
	reg.Push(t, "team/app", "2.0.0", registry.Layer{MediaType: registry.FluxContentMediaType, Data: layer})
	tampered := bytes.Clone(layer)
	tampered[len(tampered)/2] ^= 0xff
	if err := os.WriteFile(reg.BlobPath(digest.FromBytes(layer)), tampered, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ tag, want string }{
		{"2.0.0", "digest mismatch"},
		{"9.9.9", "not found"},
	} {
		f.updateSync("app", func(s *v1alpha1.Sync) { s.Spec.Source.OCI.Ref = v1alpha1.OCIRef{Tag: c.tag} })
		s := f.waitSync("Ready=False at tag "+c.tag, func(s *v1alpha1.Sync) bool {
			return s.Status.ObservedGeneration == s.Generation && meta.IsStatusConditionFalse(s.Status.Conditions, v1alpha1.ConditionReady)
		})
		ready := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
		if ready.Reason != reasonFetchFailed || !strings.Contains(ready.Message, reg.URL("team/app")+":"+c.tag) || !strings.Contains(ready.Message, c.want) {
			t.Errorf("tag %s: Ready = %s %q, want %s naming %s:%s and %q", c.tag, ready.Reason, ready.Message, reasonFetchFailed, reg.URL("team/app"), c.tag, c.want)
		}
		if s.Status.LastAppliedRevision != rev2 {
			t.Errorf("tag %s: lastAppliedRevision %q, want %q kept", c.tag, s.Status.LastAppliedRevision, rev2)
		}
		if cm, err := f.configMap("a"); err != nil || cm.Data["version"] != "2" {
			t.Errorf("tag %s: configmap a = %v, %v; want version 2 kept, nothing pruned", c.tag, cm.Data, err)
		}
	}
}
