package sops

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/e2e/sopsfixture"
	"github.com/converge-dev/converge/sources"
)

// plaintext is planted in every encrypted value: no error message may carry it.
const plaintext = "s3cr3t-plaintext-7f1c"

const secretYAML = `apiVersion: v1
kind: Secret
metadata:
  name: db
  namespace: app
type: Opaque
stringData:
  password: ` + plaintext + `
data:
  token: ` + "czNjcjN0LXBsYWludGV4dC03ZjFj" + `
`

const configMapYAML = `apiVersion: v1
kind: ConfigMap
metadata:
  name: cfg
  namespace: app
data:
  url: https://user:` + plaintext + `@db
  port: "5432"
`

func object(t *testing.T, doc []byte) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(doc, &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

// bundle is what the render makes of documents: the objects, their origins, and the
// documents with SOPS metadata as written.
func bundle(t *testing.T, docs ...[]byte) *sources.Bundle {
	t.Helper()
	b := &sources.Bundle{Revision: "main@sha1:1", Ordered: make([][]byte, len(docs))}
	for i, d := range docs {
		o := object(t, d)
		if _, ok := o.Object["sops"]; ok {
			b.Ordered[i] = d
		}
		b.Objects = append(b.Objects, o)
		b.Origins = append(b.Origins, "apps/file"+string(rune('a'+i))+".yaml")
	}
	return b
}

func keysOf(t *testing.T, ids ...string) *Keys {
	t.Helper()
	k := &Keys{}
	for _, id := range ids {
		if err := k.AddAge("test", []byte("# created: now\n"+id+"\n")); err != nil {
			t.Fatal(err)
		}
	}
	return k
}

func TestDecrypt(t *testing.T) {
	key, other := sopsfixture.NewKey(t), sopsfixture.NewKey(t)
	secret := sopsfixture.Encrypt(t, []byte(secretYAML), sopsfixture.DefaultRegex, other.Recipient, key.Recipient)
	cm := sopsfixture.Encrypt(t, []byte(configMapYAML), sopsfixture.DefaultRegex, key.Recipient)
	in := bundle(t, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: plain, namespace: app}\ndata: {a: b}\n"), secret, cm)
	var before []*unstructured.Unstructured
	for _, o := range in.Objects {
		before = append(before, o.DeepCopy())
	}
	out, err := Decrypt(t.Context(), in, keysOf(t, key.Identity))
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range in.Objects {
		if diff := cmp.Diff(before[i].Object, o.Object); diff != "" {
			t.Errorf("input object %d modified (-before +after):\n%s", i, diff)
		}
	}
	if out.Objects[0] != in.Objects[0] {
		t.Error("an object without SOPS metadata was copied; want the same pointer")
	}
	if out.Revision != in.Revision || len(out.Origins) != 3 {
		t.Errorf("bundle fields lost: %+v", out)
	}
	for i, want := range []string{secretYAML, configMapYAML} {
		got := out.Objects[i+1]
		if diff := cmp.Diff(object(t, []byte(want)).Object, got.Object); diff != "" {
			t.Errorf("object %d decrypted (-want +got):\n%s", i+1, diff)
		}
		if Encrypted(got) {
			t.Errorf("object %d still carries SOPS metadata", i+1)
		}
	}
}

// Without the document as written (a render that kept none), the object's JSON is tried:
// its keys are sorted, so the MAC of a document written in another order does not match.
func TestDecryptWithoutDocument(t *testing.T) {
	key := sopsfixture.NewKey(t)
	in := bundle(t, sopsfixture.Encrypt(t, []byte(secretYAML), sopsfixture.DefaultRegex, key.Recipient))
	in.Ordered = nil
	if _, err := Decrypt(t.Context(), in, keysOf(t, key.Identity)); !errors.Is(err, ErrIntegrity) {
		t.Fatalf("err = %v, want ErrIntegrity (MAC over another field order)", err)
	}
	sorted := "apiVersion: v1\ndata:\n  token: YQ==\nkind: Secret\nmetadata:\n  name: db\n  namespace: app\n"
	in = bundle(t, sopsfixture.Encrypt(t, []byte(sorted), sopsfixture.DefaultRegex, key.Recipient))
	in.Ordered = nil
	if _, err := Decrypt(t.Context(), in, keysOf(t, key.Identity)); err != nil {
		t.Fatalf("sorted document without its text: %v", err)
	}
}

// A kustomize secretGenerator puts an encrypted file into a data entry as it is: the entry
// is decrypted in the format its name says, as Flux does.
func TestDecryptSecretEntry(t *testing.T) {
	key := sopsfixture.NewKey(t)
	file := sopsfixture.Encrypt(t, []byte("user: admin\npassword: "+plaintext+"\n"), "", key.Recipient)
	doc := []byte("apiVersion: v1\nkind: Secret\nmetadata: {name: gen, namespace: app}\ndata:\n  creds.yaml: " +
		base64.StdEncoding.EncodeToString(file) + "\n  plain: YQ==\n")
	in := bundle(t, doc)
	if !Encrypted(in.Objects[0]) {
		t.Fatal("Encrypted = false for a Secret with an encrypted file entry")
	}
	out, err := Decrypt(t.Context(), in, keysOf(t, key.Identity))
	if err != nil {
		t.Fatal(err)
	}
	data := out.Objects[0].Object["data"].(map[string]any)
	got, _ := base64.StdEncoding.DecodeString(data["creds.yaml"].(string))
	if want := "user: admin\npassword: " + plaintext + "\n"; string(got) != want {
		t.Errorf("creds.yaml = %q, want %q", got, want)
	}
	if data["plain"] != "YQ==" {
		t.Errorf("plain entry changed: %v", data["plain"])
	}
}

// encValue returns the ciphertext on the line of key in an encrypted YAML document.
func encValue(t *testing.T, doc, key string) string {
	t.Helper()
	for _, l := range strings.Split(doc, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), key+": "); ok {
			return v
		}
	}
	t.Fatalf("no %s in\n%s", key, doc)
	return ""
}

func dropLine(doc, line string) string {
	var out []string
	for _, l := range strings.Split(doc, "\n") {
		if strings.TrimSpace(l) != line {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestDecryptFailures(t *testing.T) {
	key, wrong := sopsfixture.NewKey(t), sopsfixture.NewKey(t)
	enc := string(sopsfixture.Encrypt(t, []byte(secretYAML), sopsfixture.DefaultRegex, key.Recipient))
	password, token := encValue(t, enc, "password"), encValue(t, enc, "token")
	flipped := []byte(password)
	flipped[strings.Index(password, "data:")+6] ^= 1
	cases := []struct {
		name string
		doc  string
		keys *Keys
		want error
		says []string
	}{
		{"not configured", enc, nil, ErrNotConfigured, nil},
		{"wrong key", enc, keysOf(t, wrong.Identity), ErrKey, []string{key.Recipient}},
		{"no key", enc, &Keys{}, ErrKey, []string{"no age identity given"}},
		{"value removed", dropLine(enc, "token: "+token), keysOf(t, key.Identity), ErrIntegrity, []string{"MAC does not match"}},
		{"label added", strings.Replace(enc, "name: db", "name: db\n    labels: {a: b}", 1), keysOf(t, key.Identity), ErrIntegrity, []string{"MAC does not match", "edit it with sops"}},
		{"ciphertext altered", strings.Replace(enc, password, string(flipped), 1), keysOf(t, key.Identity), ErrIntegrity, []string{"does not decrypt"}},
		{"values swapped", strings.NewReplacer(password, token, token, password).Replace(enc), keysOf(t, key.Identity), ErrIntegrity, nil},
		{"metadata altered", strings.Replace(enc, "lastmodified: \"", "lastmodified: \"1", 1), keysOf(t, key.Identity), ErrIntegrity, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := Decrypt(t.Context(), bundle(t, []byte(tc.doc)), tc.keys)
			if out != nil {
				t.Error("a Bundle was returned with the error: it could be applied")
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			var oe *ObjectError
			if !errors.As(err, &oe) || oe.Object != "Secret app/db" || oe.Origin != "apps/filea.yaml" {
				t.Errorf("err = %v, want an ObjectError naming Secret app/db from apps/filea.yaml", err)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "apps/filea.yaml: Secret app/db: ") {
				t.Errorf("message %q does not start with the origin and the object", msg)
			}
			for _, s := range tc.says {
				if !strings.Contains(msg, s) {
					t.Errorf("message %q does not say %q", msg, s)
				}
			}
			if strings.Contains(msg, plaintext) || strings.Contains(msg, "czNjcjN0") {
				t.Errorf("message leaks the plaintext: %q", msg)
			}
		})
	}
}

// kustomize changes what is around the encrypted values (namespace, labels) and prints the
// fields sorted: the document as written is decrypted and verified, and its plaintext is
// put into the rendered object, where the same ciphertexts stand. A rendered ciphertext
// that is not the document's is refused.
func TestDecryptKeepsWhatKustomizeChanged(t *testing.T) {
	key := sopsfixture.NewKey(t)
	doc := sopsfixture.Encrypt(t, []byte(secretYAML), sopsfixture.DefaultRegex, key.Recipient)
	rendered := object(t, doc)
	rendered.SetNamespace("prod")
	rendered.SetLabels(map[string]string{"team": "a"})
	in := &sources.Bundle{Objects: []*unstructured.Unstructured{rendered}, Origins: []string{"k/kustomization.yaml"}, Ordered: [][]byte{doc}}
	out, err := Decrypt(t.Context(), in, keysOf(t, key.Identity))
	if err != nil {
		t.Fatal(err)
	}
	want := object(t, []byte(secretYAML))
	want.SetNamespace("prod")
	want.SetLabels(map[string]string{"team": "a"})
	if diff := cmp.Diff(want.Object, out.Objects[0].Object); diff != "" {
		t.Errorf("decrypted (-want +got):\n%s", diff)
	}

	other := object(t, sopsfixture.Encrypt(t, []byte(secretYAML), sopsfixture.DefaultRegex, key.Recipient))
	moved := object(t, doc)
	v, _, _ := unstructured.NestedString(other.Object, "stringData", "password")
	_ = unstructured.SetNestedField(moved.Object, v, "stringData", "password")
	in = &sources.Bundle{Objects: []*unstructured.Unstructured{moved}, Origins: []string{"k/kustomization.yaml"}, Ordered: [][]byte{doc}}
	if _, err := Decrypt(t.Context(), in, keysOf(t, key.Identity)); !errors.Is(err, ErrIntegrity) || !strings.Contains(err.Error(), ".stringData.password") {
		t.Errorf("a rendered ciphertext from elsewhere: err = %v, want ErrIntegrity naming .stringData.password", err)
	}
}

// A secretGenerator "envs" entry splits an encrypted .env file into one entry per variable,
// which cannot be decrypted after the render: refused, naming the object, key or not.
func TestDecryptRefusesSplitDotenv(t *testing.T) {
	enc := base64.StdEncoding.EncodeToString([]byte("ENC[AES256_GCM,data:abc,iv:x,tag:y,type:str]"))
	doc := "apiVersion: v1\nkind: Secret\nmetadata: {name: env, namespace: app}\ndata:\n  PASSWORD: " + enc + "\n  sops_mac: " + enc + "\n"
	for _, keys := range []*Keys{nil, keysOf(t, sopsfixture.NewKey(t).Identity)} {
		if _, err := Decrypt(t.Context(), bundle(t, []byte(doc)), keys); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "Secret app/env") {
			t.Errorf("keys %v: err = %v, want ErrUnsupported naming Secret app/env", keys.Len(), err)
		}
	}
}

// Every failing object is reported, not only the first.
func TestDecryptReportsEveryObject(t *testing.T) {
	key := sopsfixture.NewKey(t)
	in := bundle(t, sopsfixture.Encrypt(t, []byte(secretYAML), sopsfixture.DefaultRegex, key.Recipient),
		sopsfixture.Encrypt(t, []byte(configMapYAML), sopsfixture.DefaultRegex, key.Recipient))
	_, err := Decrypt(t.Context(), in, nil)
	if err == nil || !strings.Contains(err.Error(), "Secret app/db") || !strings.Contains(err.Error(), "apps/fileb.yaml: ConfigMap app/cfg") {
		t.Errorf("err = %v, want both objects named", err)
	}
}

func TestKeysFromSecret(t *testing.T) {
	key := sopsfixture.NewKey(t)
	k, err := KeysFromSecret(map[string][]byte{"age.agekey": []byte(key.Identity + "\n"), "other": []byte("x")})
	if err != nil || k.Len() != 1 {
		t.Fatalf("KeysFromSecret = %v, %v; want one key", k.Len(), err)
	}
	if _, err := KeysFromSecret(map[string][]byte{"age.key": []byte(key.Identity)}); !errors.Is(err, ErrNoAgeKey) || !strings.Contains(err.Error(), "age.key") {
		t.Errorf("no .agekey entry: err = %v, want ErrNoAgeKey naming the entries", err)
	}
	bad := strings.Replace(key.Identity, "AGE-SECRET-KEY-1", "AGE-SECRET-KEY-1X", 1)
	_, err = KeysFromSecret(map[string][]byte{"a.agekey": []byte(bad)})
	if err == nil || !strings.Contains(err.Error(), "entry a.agekey") {
		t.Fatalf("malformed key: err = %v, want an error naming the entry", err)
	}
	if strings.Contains(err.Error(), bad[20:]) {
		t.Errorf("error quotes the private key: %v", err)
	}
}

func TestMaskValues(t *testing.T) {
	key := sopsfixture.NewKey(t)
	in := bundle(t, sopsfixture.Encrypt(t, []byte(secretYAML), sopsfixture.DefaultRegex, key.Recipient),
		sopsfixture.Encrypt(t, []byte(configMapYAML), sopsfixture.DefaultRegex, key.Recipient))
	out, err := Decrypt(t.Context(), in, keysOf(t, key.Identity))
	if err != nil {
		t.Fatal(err)
	}
	for name, final := range map[string]*sources.Bundle{"decrypted": out, "not decrypted": in} {
		t.Run(name, func(t *testing.T) {
			m := MaskValues(final, in)
			y, _ := yaml.Marshal([]any{m.Objects[0].Object, m.Objects[1].Object})
			if strings.Contains(string(y), plaintext) || strings.Contains(string(y), "ENC[") || strings.Contains(string(y), "sops:") {
				t.Errorf("masked output shows a value or SOPS metadata:\n%s", y)
			}
			if got, _, _ := unstructured.NestedString(m.Objects[0].Object, "data", "token"); got != maskedData {
				t.Errorf("Secret data.token = %q, want base64 of the mask", got)
			}
			if got, _, _ := unstructured.NestedString(m.Objects[0].Object, "stringData", "password"); got != Mask {
				t.Errorf("Secret stringData.password = %q, want the mask", got)
			}
			if got, _, _ := unstructured.NestedString(m.Objects[1].Object, "metadata", "name"); got != "cfg" {
				t.Errorf("metadata masked: name = %q", got)
			}
		})
	}
	if Encrypted(out.Objects[0]) || !Encrypted(in.Objects[0]) {
		t.Error("MaskValues modified its input")
	}
}

// A document encrypted for more keys than MaxRecipients is refused before any key is tried,
// naming the object: a hostile repository could otherwise make the daemon try thousands of
// stanzas per object (about 0.17 ms each) for every object of every render. Without it, such a
// document was decrypted.
func TestDecryptBoundsRecipients(t *testing.T) {
	key := sopsfixture.NewKey(t)
	recipients := []string{key.Recipient}
	for len(recipients) <= MaxRecipients {
		recipients = append(recipients, sopsfixture.NewKey(t).Recipient)
	}
	doc := sopsfixture.Encrypt(t, []byte(configMapYAML), sopsfixture.DefaultRegex, recipients...)
	_, err := Decrypt(t.Context(), bundle(t, doc), keysOf(t, key.Identity))
	if !errors.Is(err, ErrIntegrity) || !strings.Contains(err.Error(), "ConfigMap app/cfg") ||
		!strings.Contains(err.Error(), "keys") {
		t.Fatalf("err = %v; want ErrIntegrity naming ConfigMap app/cfg and the key count", err)
	}
	doc = sopsfixture.Encrypt(t, []byte(configMapYAML), sopsfixture.DefaultRegex, recipients[:MaxRecipients]...)
	if _, err := Decrypt(t.Context(), bundle(t, doc), keysOf(t, key.Identity)); err != nil {
		t.Fatalf("%d recipients: %v", MaxRecipients, err)
	}
}

// A cancelled context stops decryption: the daemon bounds it with the build timeout.
func TestDecryptStopsWithContext(t *testing.T) {
	key := sopsfixture.NewKey(t)
	doc := sopsfixture.Encrypt(t, []byte(configMapYAML), sopsfixture.DefaultRegex, key.Recipient)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := Decrypt(ctx, bundle(t, doc), keysOf(t, key.Identity)); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v; want context.Canceled", err)
	}
}
