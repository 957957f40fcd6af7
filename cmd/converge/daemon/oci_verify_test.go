package daemon

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/converge-dev/converge/e2e/registry"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// TestDaemonVerifiesOCISignatures: a Sync with spec.source.oci.verify applies an artifact
// signed with a trusted cosign key and names the signer in its Ready message; a new
// unsigned tag is Ready=False SourceVerificationFailed naming the artifact, with nothing
// applied or pruned (I8); a tag signed by another key likewise; the next signed tag applies.
func TestDaemonVerifiesOCISignatures(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	reg := registry.Start(t, registry.Options{})
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	files := func(version string, withB bool) map[string]string {
		m := map[string]string{"a.yaml": strings.ReplaceAll(strings.Replace(cmA, "VERSION", version, 1), "NS", f.ns)}
		if withB {
			m["b.yaml"] = strings.ReplaceAll(cmB, "NS", f.ns)
		}
		return m
	}
	d1 := reg.PushFiles(t, "team/app", "v1", files("1", true))
	reg.CosignSign(t, "team/app", d1, key)
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "signers"},
		Data: map[string][]byte{"cosign.pub": registry.CosignPublicKey(t, key)}}
	if err := f.c.Create(ctx, sec); err != nil {
		t.Fatal(err)
	}
	f.startDaemon(env.Config) // AllowLocalGit: the registry listens on loopback
	f.createSync(2*time.Second, func(s *v1alpha1.Sync) {
		s.Spec.Source = v1alpha1.Source{OCI: &v1alpha1.OCISource{URL: reg.URL("team/app"), Ref: v1alpha1.OCIRef{Tag: "v1"}, Insecure: true,
			Verify: &v1alpha1.OCIVerification{Provider: "cosign", SecretRef: v1alpha1.LocalObjectReference{Name: "signers"}}}}
	})
	rev1 := "v1@" + d1.String()
	s := f.waitSync("Ready at the signed v1", readyAt(rev1))
	ready := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
	if want := "; verified: artifact " + d1.String() + " signed by ECDSA P-256 key SHA256:"; !strings.Contains(ready.Message, want) || !strings.HasSuffix(ready.Message, "(cosign.pub)") {
		t.Errorf("Ready message %q, want it to name the signer: %q…(cosign.pub)", ready.Message, want)
	}

	// v2 changes a and removes b: unsigned, then signed by another key, both refused.
	d2 := reg.PushFiles(t, "team/app", "v2", files("2", false))
	d3 := reg.PushFiles(t, "team/app", "v3", files("3", false))
	reg.CosignSign(t, "team/app", d3, other)
	for _, c := range []struct{ tag, want string }{
		{"v2", "not signed"},
		{"v3", "no signature verifies with a trusted key"},
	} {
		f.updateSync("app", func(s *v1alpha1.Sync) { s.Spec.Source.OCI.Ref = v1alpha1.OCIRef{Tag: c.tag} })
		s := f.waitSync("Ready=False at tag "+c.tag, func(s *v1alpha1.Sync) bool {
			return s.Status.ObservedGeneration == s.Generation && meta.IsStatusConditionFalse(s.Status.Conditions, v1alpha1.ConditionReady)
		})
		ready := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
		if ready.Reason != reasonSourceVerificationFailed || !strings.Contains(ready.Message, reg.URL("team/app")+":"+c.tag) || !strings.Contains(ready.Message, c.want) {
			t.Errorf("tag %s: Ready = %s %q, want %s naming %s:%s and %q", c.tag, ready.Reason, ready.Message, reasonSourceVerificationFailed, reg.URL("team/app"), c.tag, c.want)
		}
		if s.Status.LastAppliedRevision != rev1 {
			t.Errorf("tag %s: lastAppliedRevision %q, want %q kept", c.tag, s.Status.LastAppliedRevision, rev1)
		}
		if cm, err := f.configMap("a"); err != nil || cm.Data["version"] != "1" {
			t.Errorf("tag %s: configmap a = %v, %v; want version 1 kept", c.tag, cm.Data, err)
		}
		if _, err := f.configMap("b"); err != nil {
			t.Errorf("tag %s: configmap b was pruned: %v", c.tag, err)
		}
	}

	reg.CosignSign(t, "team/app", d2, key)
	f.updateSync("app", func(s *v1alpha1.Sync) { s.Spec.Source.OCI.Ref = v1alpha1.OCIRef{Tag: "v2"} })
	f.waitSync("Ready at v2 once signed", readyAt("v2@"+d2.String()))
	if _, err := f.configMap("b"); !apierrors.IsNotFound(err) {
		t.Errorf("configmap b was not pruned by the signed v2: %v", err)
	}
}
