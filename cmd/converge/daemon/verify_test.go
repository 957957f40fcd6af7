package daemon

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// sshSigningKey makes an ed25519 key with ssh-keygen and returns its private key's path and
// its authorized_keys line.
func sshSigningKey(t *testing.T) (path string, authorized []byte) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "id_ed25519")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ci@example.com", "-f", path).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	authorized, err := os.ReadFile(path + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return path, authorized
}

// verifiedSync creates the trusted keys Secret "signers" and the Sync verifying against it.
func (f *fixture) verifiedSync(keys map[string][]byte) {
	f.t.Helper()
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "signers"}, Data: keys}
	if err := f.c.Create(context.Background(), sec); err != nil {
		f.t.Fatal(err)
	}
	f.createSync(2*time.Second, func(s *v1alpha1.Sync) {
		s.Spec.Source.Git.Verify = &v1alpha1.GitVerification{SecretRef: v1alpha1.LocalObjectReference{Name: "signers"}}
	})
}

// TestDaemonVerifiesCommitSignatures: a Sync with spec.source.git.verify applies a commit
// signed with a trusted SSH key and names the signer in its Ready message; a new unsigned
// commit is Ready=False SourceVerificationFailed naming the commit, Stalled, with nothing
// applied or pruned (the old objects stay, lastAppliedRevision too: I8); the next signed
// commit is applied.
func TestDaemonVerifiesCommitSignatures(t *testing.T) {
	f := newFixture(t)
	key, pub := sshSigningKey(t)
	f.git.SigningKey = key
	rev1 := f.publish(map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "1", 1), "b.yaml": cmB})
	f.startDaemon(env.Config)
	f.verifiedSync(map[string][]byte{"ci.pub": pub})
	s := f.waitSync("Ready at the signed commit", readyAt(rev1))
	ready := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
	sha1 := strings.TrimPrefix(rev1, "main@sha1:")
	if want := "; verified: commit " + sha1 + " signed by SSH key SHA256:"; !strings.Contains(ready.Message, want) || !strings.HasSuffix(ready.Message, "(ci.pub)") {
		t.Errorf("Ready message %q, want it to name the signer: %q…(ci.pub)", ready.Message, want)
	}

	// An unsigned commit that changes a and removes b: refused before the render.
	f.git.SigningKey = ""
	rev2 := f.publish(map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "2", 1), "b.yaml": ""})
	sha2 := strings.TrimPrefix(rev2, "main@sha1:")
	s = f.waitSync("SourceVerificationFailed on the unsigned commit", func(s *v1alpha1.Sync) bool {
		c := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == reasonSourceVerificationFailed
	})
	ready = meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
	if want := "signature verification (mode HEAD) failed: commit " + sha2 + " is not signed"; !strings.Contains(ready.Message, want) {
		t.Errorf("Ready message %q, want %q", ready.Message, want)
	}
	if !meta.IsStatusConditionTrue(s.Status.Conditions, v1alpha1.ConditionStalled) {
		t.Errorf("Stalled is not True: %+v", s.Status.Conditions)
	}
	if s.Status.LastAppliedRevision != rev1 {
		t.Errorf("lastAppliedRevision %s, want %s", s.Status.LastAppliedRevision, rev1)
	}
	if cm, err := f.configMap("a"); err != nil || cm.Data["version"] != "1" {
		t.Errorf("configmap a = %v, %v; want version 1 (the unsigned commit applied nothing)", cm.Data, err)
	}
	if _, err := f.configMap("b"); err != nil {
		t.Errorf("the unsigned commit pruned configmap b: %v", err)
	}

	f.git.SigningKey = key
	rev3 := f.publish(map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "3", 1)})
	f.waitSync("Ready at the next signed commit", readyAt(rev3))
	if _, err := f.configMap("b"); !apierrors.IsNotFound(err) {
		t.Errorf("configmap b was not pruned by the signed commit: %v", err)
	}
}

// TestDaemonVerifyNoOpReadsOnlyTheKeys: once a verified Sync is converged, each no-op
// reconcile sends one request, the read of its keys Secret (as the Sync's identity, like
// the git credentials), and writes nothing: the Ready message naming the signer does not
// change between reconciles.
func TestDaemonVerifyNoOpReadsOnlyTheKeys(t *testing.T) {
	f := newFixture(t)
	key, pub := sshSigningKey(t)
	f.git.SigningKey = key
	rev := f.publish(map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "1", 1)})
	n := &noOpCounter{}
	f.startDaemon(n.config(), n.options)
	f.verifiedSync(map[string][]byte{"ci.pub": pub})
	f.waitSync("Ready", readyAt(rev))
	all, _ := n.requests(t, 3)
	secret := "GET /api/v1/namespaces/" + f.ns + "/secrets/signers"
	var others []string
	reads := 0
	for _, r := range all {
		if r == secret {
			reads++
			continue
		}
		others = append(others, r)
	}
	if reads != 3 || len(others) > 0 {
		t.Errorf("3 no-op reconciles sent %d reads of the keys Secret (want 3) and %v", reads, others)
	}
}

// TestDaemonVerifyKeysSecret: keys that cannot be used stop the Sync before the fetch is
// trusted, each with its own message and reason SourceVerificationFailed, and nothing is
// applied: a missing keys Secret (retried), then a Secret whose value is no public key (named),
// then the right key applies the commit.
func TestDaemonVerifyKeysSecret(t *testing.T) {
	f := newFixture(t)
	key, pub := sshSigningKey(t)
	f.git.SigningKey = key
	rev := f.publish(map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "1", 1)})
	f.startDaemon(env.Config)
	f.createSync(2*time.Second, func(s *v1alpha1.Sync) {
		s.Spec.Source.Git.Verify = &v1alpha1.GitVerification{Mode: "TagAndHEAD", SecretRef: v1alpha1.LocalObjectReference{Name: "signers"}}
	})
	failing := func(what, msg string) {
		t.Helper()
		s := f.waitSync(what, func(s *v1alpha1.Sync) bool {
			c := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
			return c != nil && c.Reason == reasonSourceVerificationFailed && strings.Contains(c.Message, msg)
		})
		if s.Status.LastAppliedRevision != "" {
			t.Errorf("%s: lastAppliedRevision %q, want none", what, s.Status.LastAppliedRevision)
		}
		if _, err := f.configMap("a"); !apierrors.IsNotFound(err) {
			t.Errorf("%s: configmap a was applied: %v", what, err)
		}
	}
	failing("failing on the missing keys Secret", "spec.source.git.verify.secretRef: Secret "+f.ns+"/signers read as")

	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "signers"},
		Data: map[string][]byte{"ci.pub": pub, "notes": []byte("rotate yearly\n")}}
	if err := f.c.Create(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	failing("failing on a value that is no key", `key "notes": line 1 is not an SSH public key`)

	sec.Data = map[string][]byte{"ci.pub": pub}
	if err := f.c.Update(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	failing("failing on mode TagAndHEAD for a branch", "branch main: no annotated tag to verify: mode TagAndHEAD needs a tag or semver ref")
	f.updateSync("app", func(s *v1alpha1.Sync) { s.Spec.Source.Git.Verify.Mode = "HEAD" })
	f.waitSync("Ready with the right key and mode", readyAt(rev))
}
