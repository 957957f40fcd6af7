// Package sopsfixture makes age keys and SOPS-encrypted manifests for tests, with the sops
// library itself (there is no sops binary on the test machines), so what the tests decrypt
// is what `sops --encrypt` writes. Production code must not import it.
package sopsfixture

import (
	"crypto/rand"
	"testing"
	"time"

	"filippo.io/age"
	gosops "github.com/getsops/sops/v3"
	"github.com/getsops/sops/v3/aes"
	sopsage "github.com/getsops/sops/v3/age"
	"github.com/getsops/sops/v3/config"
	sopsyaml "github.com/getsops/sops/v3/stores/yaml"
)

// Key is an age key pair.
type Key struct {
	// Identity is the private key, AGE-SECRET-KEY-1…, as an identity file holds it.
	Identity string
	// Recipient is the public key, age1….
	Recipient string
}

// NewKey generates an age key pair.
func NewKey(t testing.TB) Key {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	return Key{Identity: id.String(), Recipient: id.Recipient().String()}
}

// DefaultRegex is what a Kubernetes .sops.yaml usually sets: only data and stringData are
// encrypted, so kustomize can still read kind and name.
const DefaultRegex = "^(data|stringData)$"

// Encrypt encrypts a YAML document for the recipients, only the fields matching
// encryptedRegex (empty: every value), as `sops --encrypt --age … --encrypted-regex` does.
func Encrypt(t testing.TB, plain []byte, encryptedRegex string, recipients ...string) []byte {
	t.Helper()
	store := sopsyaml.NewStore(&config.YAMLStoreConfig{})
	branches, err := store.LoadPlainFile(plain)
	if err != nil {
		t.Fatal(err)
	}
	var group gosops.KeyGroup
	for _, r := range recipients {
		mk, err := sopsage.MasterKeyFromRecipient(r)
		if err != nil {
			t.Fatal(err)
		}
		group = append(group, mk)
	}
	meta := gosops.Metadata{
		KeyGroups:      []gosops.KeyGroup{group},
		EncryptedRegex: encryptedRegex,
		Version:        "3.13.2",
	}
	if encryptedRegex == "" {
		meta.UnencryptedSuffix = "_unencrypted"
	}
	dataKey := make([]byte, 32)
	if _, err := rand.Read(dataKey); err != nil {
		t.Fatal(err)
	}
	for _, k := range group {
		if err := k.Encrypt(dataKey); err != nil {
			t.Fatal(err)
		}
	}
	tree := gosops.Tree{Branches: branches, Metadata: meta}
	cipher := aes.NewCipher()
	mac, err := tree.Encrypt(dataKey, cipher)
	if err != nil {
		t.Fatal(err)
	}
	tree.Metadata.LastModified = time.Now().UTC()
	tree.Metadata.MessageAuthenticationCode, err = cipher.Encrypt(mac, dataKey, tree.Metadata.LastModified.Format(time.RFC3339))
	if err != nil {
		t.Fatal(err)
	}
	out, err := store.EmitEncryptedFile(tree)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
