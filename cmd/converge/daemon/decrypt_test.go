package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/e2e/sopsfixture"
	"github.com/converge-dev/converge/sources/sops"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// sopsPlaintext is planted in the encrypted Secret: only the applied Secret may hold it.
const sopsPlaintext = "planted-d41c-plaintext"

// encryptedSecret is Secret db of ns with password sopsPlaintext, encrypted for recipient.
func encryptedSecret(t *testing.T, ns, recipient string) string {
	t.Helper()
	doc := "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\n  namespace: " + ns +
		"\ntype: Opaque\nstringData:\n  password: " + sopsPlaintext + "\n"
	return string(sopsfixture.Encrypt(t, []byte(doc), sopsfixture.DefaultRegex, recipient))
}

// publishRaw writes files as they are (publish replaces "NS", which a ciphertext may hold)
// and commits them.
func (f *fixture) publishRaw(files map[string]string) string {
	f.t.Helper()
	for name, content := range files {
		p := filepath.Join(f.src, name)
		if content == "" {
			_ = os.Remove(p)
			continue
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			f.t.Fatal(err)
		}
	}
	sha, err := f.git.Publish("app", "main", f.src, "test commit")
	if err != nil {
		f.t.Fatal(err)
	}
	return "main@sha1:" + sha
}

func (f *fixture) keySecret(name string, data map[string]string) {
	f.t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name}, StringData: data}
	if err := f.c.Create(context.Background(), s); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) secretValue(name, key string) (string, error) {
	s := &corev1.Secret{}
	err := f.c.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: name}, s)
	return string(s.Data[key]), err
}

func failedAt(rev string) func(*v1alpha1.Sync) bool {
	return func(s *v1alpha1.Sync) bool {
		return s.Status.LastAttemptedRevision == rev && meta.IsStatusConditionFalse(s.Status.Conditions, v1alpha1.ConditionReady)
	}
}

// TestDaemonDecryptsSOPS: a Secret encrypted with SOPS for an age key is decrypted with the
// key of spec.decryption.secretRef and applied. A commit encrypted for another key, a
// missing key Secret, and a Sync without spec.decryption each leave Ready=False
// DecryptionFailed naming the Secret and its file, and apply and prune nothing: the objects
// of the last applied revision stay (I8). The plaintext appears nowhere but in the applied
// Secret: not in the daemon's logs (verbosity 4), the Sync's events and status, or its
// cache folder. Without decryption, the ciphertext and the sops field would reach the API
// server as a Secret (Ready=False ApplyFailed at best).
func TestDaemonDecryptsSOPS(t *testing.T) {
	f := newFixture(t)
	logs := captureLogs(t)
	key, wrong := sopsfixture.NewKey(t), sopsfixture.NewKey(t)
	f.keySecret("sops-age", map[string]string{"identity.agekey": "# test\n" + key.Identity + "\n"})
	cm := cmNamed("kept", f.ns)
	// A kustomization that labels the encrypted Secret: the render child finds the document
	// as written for the MAC, the label stays.
	kust := func(files ...string) string {
		return "resources: [" + strings.Join(files, ", ") + "]\nlabels: [{pairs: {team: a}}]\n"
	}
	rev1 := f.publishRaw(map[string]string{"kustomization.yaml": kust("kept.yaml", "secret.enc.yaml"), "kept.yaml": cm,
		"secret.enc.yaml": encryptedSecret(t, f.ns, key.Recipient)})
	cacheDir := t.TempDir()
	f.startDaemon(env.Config, func(o *Options) { o.CacheDir = cacheDir })
	f.createSync(2*time.Second, func(s *v1alpha1.Sync) {
		s.Spec.Decryption = &v1alpha1.Decryption{Provider: "sops", SecretRef: &v1alpha1.LocalObjectReference{Name: "sops-age"}}
	})
	f.waitSync("Ready with the Secret decrypted", readyAt(rev1))
	if v, err := f.secretValue("db", "password"); err != nil || v != sopsPlaintext {
		t.Fatalf("Secret db password = %q, %v; want the decrypted value", v, err)
	}
	db := &corev1.Secret{}
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "db"}, db); err != nil || db.Labels["team"] != "a" {
		t.Errorf("Secret db labels = %v, %v; want the kustomization's team: a", db.Labels, err)
	}

	expectFailed := func(rev, what string, says ...string) {
		t.Helper()
		s := f.waitSync(what, failedAt(rev))
		ready := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
		if ready.Reason != reasonDecryptionFailed {
			t.Errorf("%s: Ready reason %s, want %s: %s", what, ready.Reason, reasonDecryptionFailed, ready.Message)
		}
		for _, w := range says {
			if !strings.Contains(ready.Message, w) {
				t.Errorf("%s: the message does not say %q: %s", what, w, ready.Message)
			}
		}
		if s.Status.LastAppliedRevision != rev1 {
			t.Errorf("%s: lastAppliedRevision %s, want %s", what, s.Status.LastAppliedRevision, rev1)
		}
		if _, err := f.configMap("kept"); err != nil {
			t.Errorf("%s: ConfigMap kept was pruned: %v", what, err)
		}
		if v, err := f.secretValue("db", "password"); err != nil || v != sopsPlaintext {
			t.Errorf("%s: Secret db = %q, %v; want it kept as applied", what, v, err)
		}
	}

	// Encrypted for another key, and kept.yaml removed: nothing is applied or pruned.
	rev2 := f.publishRaw(map[string]string{"kustomization.yaml": kust("secret.enc.yaml"), "kept.yaml": "",
		"secret.enc.yaml": encryptedSecret(t, f.ns, wrong.Recipient)})
	expectFailed(rev2, "wrong key", "kustomization.yaml", "Secret "+f.ns+"/db", wrong.Recipient, "sops-age")

	// The right key again, but the key Secret is gone; once it is back, the retry applies.
	if err := f.c.Delete(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "sops-age"}}); err != nil {
		t.Fatal(err)
	}
	rev3 := f.publishRaw(map[string]string{"secret.enc.yaml": encryptedSecret(t, f.ns, key.Recipient)})
	expectFailed(rev3, "missing key Secret", f.ns+"/sops-age", "not found")
	f.keySecret("sops-age", map[string]string{"identity.agekey": key.Identity})
	f.waitSync("Ready once the key Secret is back", readyAt(rev3))
	if _, err := f.configMap("kept"); !apierrors.IsNotFound(err) {
		t.Errorf("ConfigMap kept was not pruned at a good revision: %v", err)
	}

	// Without spec.decryption the encrypted Secret is refused, not applied as ciphertext.
	f.updateSync("app", func(s *v1alpha1.Sync) { s.Spec.Decryption = nil })
	s := f.waitSync("refused without spec.decryption", func(s *v1alpha1.Sync) bool {
		r := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
		return s.Status.ObservedGeneration == s.Generation && r != nil && r.Status == metav1.ConditionFalse
	})
	ready := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
	for _, w := range []string{"kustomization.yaml", "Secret " + f.ns + "/db", "decryption is not configured", "spec.decryption"} {
		if !strings.Contains(ready.Message, w) {
			t.Errorf("without spec.decryption: the message does not say %q: %s", w, ready.Message)
		}
	}
	if v, _ := f.secretValue("db", "password"); v != sopsPlaintext {
		t.Errorf("without spec.decryption: Secret db changed to %q", v)
	}

	// The plaintext went nowhere else.
	klog.Flush()
	if strings.Contains(logs.String(), sopsPlaintext) {
		t.Errorf("the daemon's logs hold the plaintext")
	}
	if !strings.Contains(logs.String(), "reconciled") {
		t.Errorf("no daemon log captured: the log check cannot fail")
	}
	events := &corev1.EventList{}
	if err := f.c.List(context.Background(), events, client.InNamespace(f.ns)); err != nil {
		t.Fatal(err)
	}
	if len(events.Items) == 0 {
		t.Error("no events: the event check cannot fail")
	}
	for _, e := range events.Items {
		if strings.Contains(e.Message, sopsPlaintext) {
			t.Errorf("event %s holds the plaintext", e.Name)
		}
	}
	if st, _ := json.Marshal(s.Status); bytes.Contains(st, []byte(sopsPlaintext)) {
		t.Errorf("the Sync's status holds the plaintext")
	}
	files := 0
	err := filepath.WalkDir(cacheDir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		files++
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte(sopsPlaintext)) {
			t.Errorf("%s on disk holds the plaintext", p)
		}
		return nil
	})
	if err != nil || files == 0 {
		t.Errorf("cache folder walk: %d files, %v: the disk check cannot fail", files, err)
	}
}

// TestDaemonDecryptsEncryptedSecretEntries: a Secret that a secretGenerator made of a SOPS
// file holds the file in base64, with no "sops" key of its own; the daemon, which keeps a
// render as JSON until a step needs it, still finds it encrypted, decrypts it, and applies
// the plaintext, never the ciphertext.
func TestDaemonDecryptsEncryptedSecretEntries(t *testing.T) {
	f := newFixture(t)
	key := sopsfixture.NewKey(t)
	f.keySecret("sops-age", map[string]string{"identity.agekey": key.Identity})
	file := string(sopsfixture.Encrypt(t, []byte("password: "+sopsPlaintext+"\n"), "^password$", key.Recipient))
	rev := f.publishRaw(map[string]string{
		"kustomization.yaml": "secretGenerator:\n- name: gen\n  namespace: " + f.ns + "\n  files: [creds.yaml=creds.enc.yaml]\n" +
			"  options: {disableNameSuffixHash: true}\n",
		"creds.enc.yaml": file,
	})
	f.startDaemon(env.Config)
	f.createSync(2*time.Second, func(s *v1alpha1.Sync) {
		s.Spec.Decryption = &v1alpha1.Decryption{Provider: "sops", SecretRef: &v1alpha1.LocalObjectReference{Name: "sops-age"}}
	})
	f.waitSync("Ready with the Secret's entry decrypted", readyAt(rev))
	if v, err := f.secretValue("gen", "creds.yaml"); err != nil || !strings.Contains(v, sopsPlaintext) || strings.Contains(v, "ENC[") {
		t.Fatalf("Secret gen creds.yaml = %q, %v; want the decrypted file", v, err)
	}
}

// TestDaemonReadsDecryptionKeyAsTheServiceAccount: the key Secret is read as the Sync's
// identity (I13). While the service account may not read Secrets, the Sync is Ready=False
// DecryptionFailed naming the Secret and the service account, and nothing is applied.
// Without the check the daemon would decrypt with a Secret its tenant may not read.
func TestDaemonReadsDecryptionKeyAsTheServiceAccount(t *testing.T) {
	f := newFixture(t)
	key := sopsfixture.NewKey(t)
	f.keySecret("sops-age", map[string]string{"identity.agekey": key.Identity})
	f.deployer() // ConfigMaps only
	ctx := context.Background()
	role := &rbacv1.Role{}
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "deployer"}, role); err != nil {
		t.Fatal(err)
	}
	// May apply Secrets, not read the key one.
	role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"db"}, Verbs: []string{"*"}})
	if err := f.c.Update(ctx, role); err != nil {
		t.Fatal(err)
	}
	rev := f.publishRaw(map[string]string{"own.yaml": cmNamed("own", f.ns), "secret.enc.yaml": encryptedSecret(t, f.ns, key.Recipient)})
	f.startDaemon(env.Config, func(o *Options) { o.DefaultServiceAccount = "deployer" })
	f.createSync(time.Hour, func(s *v1alpha1.Sync) {
		s.Spec.Decryption = &v1alpha1.Decryption{Provider: "sops", SecretRef: &v1alpha1.LocalObjectReference{Name: "sops-age"}}
	})
	user := "system:serviceaccount:" + f.ns + ":deployer"
	s := f.waitSync("the key Secret read refused to "+user, failedAt(rev))
	ready := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
	if ready.Reason != reasonDecryptionFailed {
		t.Errorf("Ready reason %s, want %s", ready.Reason, reasonDecryptionFailed)
	}
	for _, w := range []string{f.ns + "/sops-age", user, "forbidden"} {
		if !strings.Contains(ready.Message, w) {
			t.Errorf("the message does not say %q: %s", w, ready.Message)
		}
	}
	if _, err := f.configMap("own"); !apierrors.IsNotFound(err) {
		t.Errorf("ConfigMap own was applied although decryption failed: %v", err)
	}
	if _, err := f.secretValue("db", "password"); !apierrors.IsNotFound(err) {
		t.Errorf("Secret db was applied: %v", err)
	}
}

// TestDaemonWithoutDecryptionProgram: without converge-decrypt beside converge, a commit
// holding an encrypted Secret leaves Ready=False DecryptionFailed saying what to install,
// and applies and prunes nothing: the last applied revision's objects stay. It is retried:
// once the program is back, the commit is applied. A commit without encrypted objects
// needs no program.
func TestDaemonWithoutDecryptionProgram(t *testing.T) {
	f := newFixture(t)
	key := sopsfixture.NewKey(t)
	f.keySecret("sops-age", map[string]string{"identity.agekey": key.Identity + "\n"})
	rev1 := f.publishRaw(map[string]string{"kustomization.yaml": "resources: [kept.yaml, secret.enc.yaml]\n",
		"kept.yaml": cmNamed("kept", f.ns), "secret.enc.yaml": encryptedSecret(t, f.ns, key.Recipient)})
	f.startDaemon(env.Config)
	f.createSync(2*time.Second, func(s *v1alpha1.Sync) {
		s.Spec.Decryption = &v1alpha1.Decryption{Provider: "sops", SecretRef: &v1alpha1.LocalObjectReference{Name: "sops-age"}}
	})
	f.waitSync("Ready with the Secret decrypted", readyAt(rev1))

	program := os.Getenv(sops.ProgramEnv)
	t.Setenv(sops.ProgramEnv, filepath.Join(t.TempDir(), sops.ProgramName))
	other := string(sopsfixture.Encrypt(t, []byte("apiVersion: v1\nkind: Secret\nmetadata:\n  name: db2\n  namespace: "+f.ns+
		"\nstringData:\n  password: "+sopsPlaintext+"\n"), sopsfixture.DefaultRegex, key.Recipient))
	rev2 := f.publishRaw(map[string]string{"kustomization.yaml": "resources: [secret.enc.yaml]\n", "kept.yaml": "", "secret.enc.yaml": other})
	s := f.waitSync("failed without the program", failedAt(rev2))
	ready := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
	for _, w := range []string{"Secret " + f.ns + "/db2", "SOPS decryption needs converge-decrypt next to converge: make build builds both, the image ships both"} {
		if !strings.Contains(ready.Message, w) {
			t.Errorf("the message does not say %q: %s", w, ready.Message)
		}
	}
	if ready.Reason != reasonDecryptionFailed || s.Status.LastAppliedRevision != rev1 {
		t.Errorf("Ready reason %s, lastAppliedRevision %s; want %s, %s", ready.Reason, s.Status.LastAppliedRevision, reasonDecryptionFailed, rev1)
	}
	if _, err := f.configMap("kept"); err != nil {
		t.Errorf("ConfigMap kept was pruned: %v", err)
	}
	if _, err := f.secretValue("db2", "password"); !apierrors.IsNotFound(err) {
		t.Errorf("Secret db2 was applied without its decryption: %v", err)
	}

	if err := os.Setenv(sops.ProgramEnv, program); err != nil {
		t.Fatal(err)
	}
	f.waitSync("Ready once the program is back", readyAt(rev2))
	if v, err := f.secretValue("db2", "password"); err != nil || v != sopsPlaintext {
		t.Errorf("Secret db2 password = %q, %v; want the decrypted value", v, err)
	}
}

// TestDecryptionKeptBetweenCommits checks that reconciles of an unchanged revision with the
// same keys reuse the last decryption: the decryption program (here a wrapper that counts its
// starts) runs once for the commit, not once per reconcile, so a Sync with encrypted objects
// does not take a render slot and a process at every interval. A change of the keys decrypts
// again. Without the memo: a start per reconcile.
func TestDecryptionKeptBetweenCommits(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	count := filepath.Join(dir, "starts")
	wrapper := filepath.Join(dir, "converge-decrypt")
	// The child's environment has no PATH: absolute paths only.
	script := "#!/bin/sh\n/bin/echo start >> " + count + "\nexec " + exe + "\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(sops.ProgramEnv, wrapper)
	starts := func() int {
		b, _ := os.ReadFile(count)
		return strings.Count(string(b), "start")
	}

	f := newFixture(t)
	key := sopsfixture.NewKey(t)
	f.keySecret("sops-age", map[string]string{"identity.agekey": key.Identity + "\n"})
	rev := f.publishRaw(map[string]string{"kustomization.yaml": "resources: [secret.enc.yaml]\n",
		"secret.enc.yaml": encryptedSecret(t, f.ns, key.Recipient)})
	f.startDaemon(env.Config)
	f.createSync(time.Hour, func(s *v1alpha1.Sync) {
		s.Spec.Decryption = &v1alpha1.Decryption{Provider: "sops", SecretRef: &v1alpha1.LocalObjectReference{Name: "sops-age"}}
	})
	f.waitSync("Ready", readyAt(rev))
	first := starts()
	if first == 0 {
		t.Fatal("the decryption program never ran")
	}
	for i := range 3 {
		f.requestReconcile("app")
		f.waitSync(fmt.Sprintf("reconcile %d handled", i+1), func(s *v1alpha1.Sync) bool {
			return s.Status.LastHandledRequest != "" && s.Status.LastHandledRequest == s.Annotations[v1alpha1.RequestedAtAnnotation] &&
				meta.IsStatusConditionTrue(s.Status.Conditions, v1alpha1.ConditionReady)
		})
	}
	if got := starts(); got != first {
		t.Errorf("three reconciles of revision %s started the decryption program %d more times, want none", rev, got-first)
	}

	// Another key beside the first: decrypted again, once.
	other := sopsfixture.NewKey(t)
	sec := &corev1.Secret{}
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "sops-age"}, sec); err != nil {
		t.Fatal(err)
	}
	sec.Data["other.agekey"] = []byte(other.Identity + "\n")
	if err := f.c.Update(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	f.requestReconcile("app")
	f.waitSync("the reconcile after the key change handled", func(s *v1alpha1.Sync) bool {
		return s.Status.LastHandledRequest == s.Annotations[v1alpha1.RequestedAtAnnotation] &&
			meta.IsStatusConditionTrue(s.Status.Conditions, v1alpha1.ConditionReady)
	})
	if got := starts(); got != first+1 {
		t.Errorf("after a change of the keys the program started %d more times, want 1", got-first)
	}
}
