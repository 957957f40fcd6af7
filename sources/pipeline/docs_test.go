package pipeline

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"testing"

	"github.com/converge-dev/converge/e2e/sopsfixture"
	"github.com/converge-dev/converge/sources"
)

// encoded is bundle's render as a load asked for JSON gives it (sources.Bundle.Docs).
func encoded(t *testing.T, docs ...string) *sources.Bundle {
	t.Helper()
	b := bundle(t, docs...)
	for _, o := range b.Objects {
		js, err := json.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		b.Docs = append(b.Docs, js)
	}
	b.Objects, b.Own = nil, nil
	return b
}

// TestPrepareDecodesDocumentsOnlyForAStep: a render of JSON documents is handed on as it
// is when no step has work, and decoded, then decrypted, substituted or labelled, when one
// has: an encrypted document is never handed on encrypted, nor a variable unsubstituted.
func TestPrepareDecodesDocumentsOnlyForAStep(t *testing.T) {
	key := sopsfixture.NewKey(t)
	enc := string(sopsfixture.Encrypt(t, []byte(configMapYAML), sopsfixture.DefaultRegex, key.Recipient))
	field := func(b *sources.Bundle, i int, path ...string) any {
		var v any = b.Objects[i].Object
		for _, p := range path {
			v = v.(map[string]any)[p]
		}
		return v
	}

	plain := encoded(t, plainYAML)
	res, err := Prepare(t.Context(), plain, Options{})
	if err != nil || res.Bundle != plain || res.Bundle.Objects != nil || len(res.Bundle.Docs) != 1 {
		t.Fatalf("no step: %v; want the documents handed on as they are", err)
	}

	res, err = Prepare(t.Context(), encoded(t, plainYAML), Options{Metadata: &Metadata{Labels: map[string]string{"team": "a"}}})
	if err != nil || res.Bundle.Docs != nil || field(res.Bundle, 0, "metadata", "labels", "team") != "a" {
		t.Fatalf("common metadata: %v; want the objects decoded and labelled", err)
	}

	sub := substitution(nil, map[string]string{"tier": "gold"}, false)
	res, err = Prepare(t.Context(), encoded(t, plainYAML), Options{Substitution: sub})
	if err != nil || res.Bundle.Docs != nil || field(res.Bundle, 0, "data", "tier") != "gold" {
		t.Fatalf("substitution: %v; want the objects decoded and substituted", err)
	}

	res, err = Prepare(t.Context(), encoded(t, plainYAML, enc), Options{Decryption: Decryption{Keys: keysOf(t, key.Identity)}})
	if err != nil || res.Bundle.Docs != nil || field(res.Bundle, 1, "data", "password") != plaintext {
		t.Fatalf("an encrypted document: %v; want the objects decoded and decrypted", err)
	}
	var de *DecryptError
	if _, err := Prepare(t.Context(), encoded(t, enc), Options{}); !errors.As(err, &de) || !de.Terminal {
		t.Fatalf("an encrypted document without keys: %v; want a terminal DecryptError", err)
	}

	// Encrypted as a whole file in a Secret's entry (a secretGenerator of a SOPS file: its
	// JSON holds the file in base64), or as an encrypted .env file's variables.
	file := string(sopsfixture.Encrypt(t, []byte("password: "+plaintext+"\n"), sopsfixture.DefaultRegex, key.Recipient))
	entry := "apiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: app}\ndata:\n  secret.yaml: " + base64.StdEncoding.EncodeToString([]byte(file)) + "\n"
	dotenv := "apiVersion: v1\nkind: Secret\nmetadata: {name: e, namespace: app}\ndata:\n  sops_mac: " + base64.StdEncoding.EncodeToString([]byte("ENC[AES256_GCM,data:aa]")) + "\n"
	for name, doc := range map[string]string{"an encrypted file in a Secret": entry, "an encrypted .env file's variables": dotenv} {
		if res, err := Prepare(t.Context(), encoded(t, doc), Options{}); !errors.As(err, &de) {
			t.Errorf("%s without keys: %v (documents handed on: %v); want a DecryptError", name, err, res.Bundle != nil)
		}
	}
	res, err = Prepare(t.Context(), encoded(t, plainYAML, entry), Options{Decryption: Decryption{Keys: keysOf(t, key.Identity)}})
	if err != nil || res.Bundle.Docs != nil || res.Bundle.Objects[1].Object["data"].(map[string]any)["secret.yaml"] == base64.StdEncoding.EncodeToString([]byte(file)) {
		t.Fatalf("an encrypted file in a Secret with keys: %v; want it decoded and decrypted", err)
	}
}
