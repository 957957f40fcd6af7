package sops

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/e2e/sopsfixture"
	"github.com/converge-dev/converge/sources"
)

const transplantSecret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\n  namespace: app\ndata:\n  password: czNjcjN0LXBsYWludGV4dC03ZjFj\n"

// loadDir writes files into a folder and loads it as the daemon does.
func loadDir(t *testing.T, files map[string]string) *sources.Bundle {
	t.Helper()
	dir := t.TempDir()
	for name, s := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	b, err := sources.NewLoader(t.TempDir()).Load(context.Background(), sources.Source{Dir: dir, Path: "."}, sources.DefaultLoadOptions())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDecryptRefusesTransplantedCiphertext: a repository writer without the key copies the
// ciphertext and the sops block of an encrypted Secret into a ConfigMap of another
// namespace (a wider audience reads ConfigMaps), with its "mac" written so that it is found
// or not found by the MAC index. The ConfigMap must not be decrypted. Without it, the Secret's
// plaintext was applied as the ConfigMap.
func TestDecryptRefusesTransplantedCiphertext(t *testing.T) {
	key := sopsfixture.NewKey(t)
	enc := sopsfixture.Encrypt(t, []byte(transplantSecret), sopsfixture.DefaultRegex, key.Recipient)
	var m map[string]any
	if err := yaml.Unmarshal(enc, &m); err != nil {
		t.Fatal(err)
	}
	ct := m["data"].(map[string]any)["password"].(string)
	sopsBlock, _ := yaml.Marshal(map[string]any{"sops": m["sops"]})
	evil := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: leak\n  namespace: public\ndata:\n  password: " + ct + "\n" + string(sopsBlock)
	for name, doc := range map[string]string{
		"mac as written": evil,
		"mac tagged":     strings.Replace(evil, "mac: ENC[", "mac: !!str ENC[", 1),
	} {
		b := loadDir(t, map[string]string{"secret.enc.yaml": string(enc), "leak.yaml": doc, "kustomization.yaml": "resources:\n- leak.yaml\n"})
		out, err := Decrypt(t.Context(), b, keysOf(t, key.Identity))
		if err == nil {
			t.Errorf("%s: decrypted %s %s/%s with data %v", name, out.Objects[0].GetKind(), out.Objects[0].GetNamespace(),
				out.Objects[0].GetName(), out.Objects[0].Object["data"])
			continue
		}
		if !errors.Is(err, ErrIntegrity) {
			t.Errorf("%s: %v, want an integrity error", name, err)
		}
	}
}

// TestDecryptRefusesReplacedEncryptedValue: a kustomize patch that puts a plain value where
// an encrypted one was is refused: the value was not written by whoever holds the key.
// Without it, it was applied and the MAC reported verified.
func TestDecryptRefusesReplacedEncryptedValue(t *testing.T) {
	key := sopsfixture.NewKey(t)
	enc := sopsfixture.Encrypt(t, []byte(transplantSecret), sopsfixture.DefaultRegex, key.Recipient)
	b := loadDir(t, map[string]string{
		"secret.enc.yaml":    string(enc),
		"kustomization.yaml": "resources:\n- secret.enc.yaml\npatches:\n- patch: |\n    apiVersion: v1\n    kind: Secret\n    metadata: {name: db, namespace: app}\n    data: {password: YXR0YWNrZXI=}\n",
	})
	out, err := Decrypt(t.Context(), b, keysOf(t, key.Identity))
	if err == nil || !errors.Is(err, ErrIntegrity) || !strings.Contains(err.Error(), "data.password") {
		t.Errorf("decrypt of a patched Secret: %v (decrypted: %v), want an integrity error naming data.password", err, out != nil)
	}
}
