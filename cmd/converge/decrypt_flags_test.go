package main

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/cmd/converge/internal/scheme"
	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/e2e/sopsfixture"
)

// sopsSecret is Secret db of ns holding password, encrypted for recipient.
func sopsSecret(t *testing.T, ns, password, recipient string) string {
	t.Helper()
	doc := "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\n  namespace: " + ns + "\ntype: Opaque\nstringData:\n  password: " + password + "\n"
	return string(sopsfixture.Encrypt(t, []byte(doc), sopsfixture.DefaultRegex, recipient))
}

// writeFiles writes files (path → content) under dir as they are.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// leaks returns the forms of the plaintexts found in out: as is and base64-encoded.
func leaks(out string, plaintexts ...string) []string {
	var found []string
	for _, p := range plaintexts {
		for _, form := range []string{p, base64.StdEncoding.EncodeToString([]byte(p))} {
			if strings.Contains(out, form) {
				found = append(found, form)
			}
		}
	}
	return found
}

// TestBuildDecryptsSOPS: `converge build` prints SOPS-encrypted values as **SOPS** (as
// flux build kustomization does) without a key, and with --decryption-key-file, which
// decrypts and so checks the key and the MAC; --show-secrets prints the plaintext, through
// a kustomization too (the render child finds the document as written for the MAC). A
// wrong key, and a file edited by hand after encryption, fail with exit 2 naming the file
// and the object; a kustomization that labels the encrypted Secret is decrypted
// with the MAC verified. Without decryption, build would print the ciphertext and the sops
// metadata.
func TestBuildDecryptsSOPS(t *testing.T) {
	const plaintext = "build-plaintext-93be"
	key, wrong := sopsfixture.NewKey(t), sopsfixture.NewKey(t)
	dir := t.TempDir()
	enc := sopsSecret(t, "app", plaintext, key.Recipient)
	writeFiles(t, dir, map[string]string{
		"keys/right.txt": "# created by the test\n" + key.Identity + "\n", "keys/wrong.txt": wrong.Identity + "\n",
		"plain/secret.enc.yaml": enc,
		"kust/secret.enc.yaml":  enc, "kust/kustomization.yaml": "resources: [secret.enc.yaml]\n",
		"labelled/secret.enc.yaml": enc, "labelled/kustomization.yaml": "resources: [secret.enc.yaml]\nlabels: [{pairs: {team: a}}]\n",
		"gen/creds.enc.yaml":     string(sopsfixture.Encrypt(t, []byte("user: admin\npassword: "+plaintext+"\n"), "", key.Recipient)),
		"gen/kustomization.yaml": "secretGenerator:\n- name: creds\n  namespace: app\n  files: [creds.yaml=creds.enc.yaml]\n",
		"edited/secret.enc.yaml": strings.Replace(enc, "type: Opaque", "type: Opaque\nimmutable: true", 1),
	})
	right, bad := filepath.Join(dir, "keys/right.txt"), filepath.Join(dir, "keys/wrong.txt")
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		shows  bool     // the plaintext is printed
		says   []string // in stdout (code 0) or stderr
		masked bool
	}{
		{"no key", []string{filepath.Join(dir, "plain")}, 0, false, []string{"password: '" + "**SOPS**'"}, true},
		{"key", []string{filepath.Join(dir, "plain"), "--decryption-key-file", right}, 0, false, nil, true},
		{"show secrets", []string{filepath.Join(dir, "plain"), "--decryption-key-file", bad, "--decryption-key-file", right, "--show-secrets"}, 0, true, nil, false},
		{"kustomization", []string{filepath.Join(dir, "kust"), "--decryption-key-file", right, "--show-secrets"}, 0, true, nil, false},
		{"secretGenerator file", []string{filepath.Join(dir, "gen"), "--decryption-key-file", right, "--show-secrets"}, 0, false,
			[]string{base64.StdEncoding.EncodeToString([]byte("user: admin\npassword: " + plaintext + "\n"))}, false},
		{"secretGenerator file masked", []string{filepath.Join(dir, "gen"), "--decryption-key-file", right}, 0, false,
			[]string{"creds.yaml: " + base64.StdEncoding.EncodeToString([]byte("**SOPS**"))}, false},
		{"wrong key", []string{filepath.Join(dir, "plain"), "--decryption-key-file", bad}, 2, false,
			[]string{"secret.enc.yaml", "Secret app/db", key.Recipient, "--decryption-key-file"}, false},
		{"labelled by kustomize", []string{filepath.Join(dir, "labelled"), "--decryption-key-file", right, "--show-secrets"}, 0, true,
			[]string{"team: a"}, false},
		{"edited by hand", []string{filepath.Join(dir, "edited"), "--decryption-key-file", right}, 2, false,
			[]string{"secret.enc.yaml:1: Secret app/db", "MAC does not match"}, false},
		{"missing key file", []string{filepath.Join(dir, "plain"), "--decryption-key-file", filepath.Join(dir, "nope")}, 2, false, []string{"nope"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := runOffline(append([]string{"build"}, tc.args...)...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d:\n%s%s", code, tc.code, out, errOut)
			}
			if got := len(leaks(out+errOut, plaintext)) > 0; got != tc.shows {
				t.Errorf("plaintext printed: %v, want %v:\n%s%s", got, tc.shows, out, errOut)
			}
			text := errOut
			if code == 0 {
				text = out
			}
			for _, w := range tc.says {
				if !strings.Contains(text, w) {
					t.Errorf("the output does not say %q:\n%s", w, text)
				}
			}
			if code == 0 && (strings.Contains(out, "ENC[") || strings.Contains(out, "sops:")) {
				t.Errorf("ciphertext or SOPS metadata printed:\n%s", out)
			}
			if tc.masked && !strings.Contains(out, "**SOPS**") {
				t.Errorf("no masked value printed:\n%s", out)
			}
		})
	}
}

// TestApplyCLIDecryptsSOPS: `converge apply` refuses an encrypted Secret without
// --decryption-key-file (exit 2, naming it, nothing written); with it, --dry-run --diff
// in every output format shows the Secret and an encrypted ConfigMap without their values
// (the engine masks Secrets; the CLI redacts what it decrypted from other kinds), a real
// apply stores the plaintext, and a dry-run diff of changed values shows neither the old
// nor the new ones.
// Without decryption, the ciphertext would reach the API server (".sops: field not declared
// in schema").
func TestApplyCLIDecryptsSOPS(t *testing.T) {
	cluster.Require(t, env)
	ns := env.Namespace(t)
	key := sopsfixture.NewKey(t)
	const v1, v2 = "apply-plaintext-one-5d2a", "apply-plaintext-two-5d2a"
	const c1, c2 = "configmap-plaintext-one-77e0", "configmap-plaintext-two-77e0"
	encCM := func(v string) string {
		doc := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: conf\n  namespace: " + ns + "\ndata:\n  url: https://u:" + v + "@db\n"
		return string(sopsfixture.Encrypt(t, []byte(doc), "^data$", key.Recipient))
	}
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "age.txt")
	set := filepath.Join(dir, "set")
	writeFiles(t, dir, map[string]string{"age.txt": key.Identity + "\n", "set/secret.enc.yaml": sopsSecret(t, ns, v1, key.Recipient),
		"set/conf.enc.yaml": encCM(c1),
		"set/cm.yaml":       "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: plain, namespace: " + ns + "}\ndata: {a: b}\n"})
	c, err := client.New(env.Config, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	secret := func() (string, error) {
		s := &corev1.Secret{}
		err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "db"}, s)
		return string(s.Data["password"]), err
	}

	out, errOut, code := cliErr("apply", set, "-n", ns, "--inventory", ns+"/app")
	if code != 2 || !strings.Contains(errOut, "secret.enc.yaml") || !strings.Contains(errOut, "Secret "+ns+"/db") ||
		!strings.Contains(errOut, "--decryption-key-file") {
		t.Errorf("apply without a key: exit %d, want 2 naming the file, the Secret and the flag:\n%s%s", code, out, errOut)
	}
	if _, err := secret(); !apierrors.IsNotFound(err) {
		t.Errorf("apply without a key wrote Secret db: %v", err)
	}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "plain"}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("apply without a key wrote ConfigMap plain: %v", err)
	}

	dryRun := func(what string, plaintexts ...string) {
		t.Helper()
		for _, o := range []string{"", "json", "markdown", "yaml"} {
			args := []string{"apply", set, "-n", ns, "--inventory", ns + "/app", "--dry-run", "--diff", "--decryption-key-file", keyFile}
			if o != "" {
				args = append(args, "-o", o)
			}
			out, errOut, code := cliErr(args...)
			if code != exitCodeChanges {
				t.Errorf("%s -o %q: exit %d, want %d:\n%s%s", what, o, code, exitCodeChanges, out, errOut)
			}
			if !strings.Contains(out, "db") {
				t.Errorf("%s -o %q: the output does not name Secret db:\n%s", what, o, out)
			}
			if l := leaks(out+errOut, plaintexts...); len(l) > 0 {
				t.Errorf("%s -o %q: the output holds %q:\n%s%s", what, o, l, out, errOut)
			}
		}
	}
	dryRun("create", v1, c1)

	if out, errOut, code := cliErr("apply", set, "-n", ns, "--inventory", ns+"/app", "--decryption-key-file", keyFile); code != 0 {
		t.Fatalf("apply: exit %d:\n%s%s", code, out, errOut)
	}
	if v, err := secret(); err != nil || v != v1 {
		t.Fatalf("Secret db password = %q, %v; want the decrypted value", v, err)
	}

	cm := &corev1.ConfigMap{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "conf"}, cm); err != nil || cm.Data["url"] != "https://u:"+c1+"@db" {
		t.Fatalf("ConfigMap conf = %v, %v; want the decrypted url", cm.Data, err)
	}

	writeFiles(t, dir, map[string]string{"set/secret.enc.yaml": sopsSecret(t, ns, v2, key.Recipient), "set/conf.enc.yaml": encCM(c2)})
	dryRun("change", v1, v2, c1, c2)
	if v, _ := secret(); v != v1 {
		t.Errorf("the dry-run changed Secret db to %q", v)
	}
}

// TestApplyCLIWithholdsDiffOfRenamedDecryptedObject: an encrypted ConfigMap whose name a
// substitution completes (conf-${ENV}) has its dry-run diff withheld like any decrypted
// object that is not a Secret: the live side holds the earlier plaintext. Were the diff
// matched by the name before substitution, it would be printed with the plaintext of the
// earlier apply.
func TestApplyCLIWithholdsDiffOfRenamedDecryptedObject(t *testing.T) {
	cluster.Require(t, env)
	ns := env.Namespace(t)
	key := sopsfixture.NewKey(t)
	const c1, c2 = "plaintext-one-91ab", "plaintext-two-91ab"
	encCM := func(v string) string {
		doc := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: conf-${ENV}\n  namespace: " + ns + "\ndata:\n  url: https://u:" + v + "@db\n"
		return string(sopsfixture.Encrypt(t, []byte(doc), "^data$", key.Recipient))
	}
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "age.txt")
	set := filepath.Join(dir, "set")
	writeFiles(t, dir, map[string]string{"age.txt": key.Identity + "\n", "set/conf.enc.yaml": encCM(c1)})
	base := []string{"apply", set, "-n", ns, "--inventory", ns + "/app", "--decryption-key-file", keyFile, "--substitute", "ENV=prod"}
	if out, errOut, code := cliErr(base...); code != 0 {
		t.Fatalf("apply: exit %d:\n%s%s", code, out, errOut)
	}
	writeFiles(t, dir, map[string]string{"set/conf.enc.yaml": encCM(c2)})
	for _, o := range []string{"", "json", "markdown"} {
		args := append(append([]string(nil), base...), "--dry-run", "--diff")
		if o != "" {
			args = append(args, "-o", o)
		}
		out, errOut, _ := cliErr(args...)
		if l := leaks(out+errOut, c1, c2); len(l) > 0 {
			t.Errorf("-o %q: the output holds %q:\n%s%s", o, l, out, errOut)
		}
		if !strings.Contains(out, "diff withheld") {
			t.Errorf("-o %q: no withheld diff for conf-prod:\n%s", o, out)
		}
	}
}
