package pipeline

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/e2e/sopsfixture"
	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/sources/sops"
	"github.com/converge-dev/converge/sources/varsubst"
)

// plaintext is planted in the encrypted value: only the prepared objects may carry it.
const plaintext = "s3cr3t-plaintext-7f1c"

const configMapYAML = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n  namespace: app\ndata:\n  password: " + plaintext + "\n  url: https://${host}/db\n"

const plainYAML = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: plain, namespace: app}\ndata: {tier: '${tier}'}\n"

// bundle is what the render makes of documents: the objects, their origins, and the
// documents with SOPS metadata as written.
func bundle(t *testing.T, docs ...string) *sources.Bundle {
	t.Helper()
	b := &sources.Bundle{Revision: "main@sha1:1", Ordered: make([][]byte, len(docs))}
	for i, d := range docs {
		o := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(d), &o.Object); err != nil {
			t.Fatal(err)
		}
		if _, ok := o.Object["sops"]; ok {
			b.Ordered[i] = []byte(d)
		}
		b.Objects = append(b.Objects, o)
		b.Origins = append(b.Origins, "apps/file"+string(rune('a'+i))+".yaml")
	}
	return b
}

func keysOf(t *testing.T, ids ...string) func(context.Context) (*sops.Keys, error) {
	t.Helper()
	k := &sops.Keys{}
	for _, id := range ids {
		if err := k.AddAge("test", []byte(id+"\n")); err != nil {
			t.Fatal(err)
		}
	}
	return func(context.Context) (*sops.Keys, error) { return k, nil }
}

// variables returns srcs and err, counting its calls in n.
func variables(n *int, err error, srcs ...varsubst.Source) func(context.Context) ([]varsubst.Source, error) {
	return func(context.Context) ([]varsubst.Source, error) {
		*n++
		return srcs, err
	}
}

func value(t *testing.T, o *unstructured.Unstructured, key string) string {
	t.Helper()
	v, _, _ := unstructured.NestedString(o.Object, "data", key)
	return v
}

// TestPrepareDecryptsThenSubstitutes: an encrypted object is decrypted, then its plaintext
// is substituted like any value; the Redactor hides the decrypted value, the Secret
// variable as read and as substituted, and the values given to redact; the rendered
// Bundle is not modified.
func TestPrepareDecryptsThenSubstitutes(t *testing.T) {
	key := sopsfixture.NewKey(t)
	in := bundle(t, plainYAML, string(sopsfixture.Encrypt(t, []byte(configMapYAML), sopsfixture.DefaultRegex, key.Recipient)))
	calls := 0
	res, err := Prepare(t.Context(), in, Options{
		Decryption: Decryption{Keys: keysOf(t, key.Identity)},
		Substitution: &Substitution{Variables: variables(&calls, nil,
			varsubst.Source{Name: "Secret app/vars", Values: map[string]string{"host": "db.internal\n"}, Sensitive: true},
			varsubst.Source{Name: "spec.postBuild.substitute", Values: map[string]string{"tier": "gold"}})},
		Redact: []string{"helm-value"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := value(t, res.Bundle.Objects[1], "url"), "https://db.internal/db"; got != want {
		t.Errorf("decrypted and substituted url = %q, want %q", got, want)
	}
	if got := value(t, res.Bundle.Objects[0], "tier"); got != "gold" {
		t.Errorf("plain object: tier = %q", got)
	}
	if res.Rendered != in || res.Decrypted == in || !sops.Encrypted(in.Objects[1]) || value(t, in.Objects[0], "tier") != "${tier}" {
		t.Error("the rendered bundle was modified, or Rendered and Decrypted do not tell it from the decrypted one")
	}
	msg := "url " + plaintext + " host db.internal\n and db.internal, helm-value"
	if got, want := res.Redactor.String(msg), "url *** host *** and ***, ***"; got != want {
		t.Errorf("redacted %q, want %q", got, want)
	}
}

// TestPrepareReadsKeysOnlyWhenEncrypted: a bundle without encrypted objects is not
// decrypted and its keys are not read (a Sync without secrets costs no request).
func TestPrepareReadsKeysOnlyWhenEncrypted(t *testing.T) {
	in := bundle(t, plainYAML)
	read := 0
	keys := func(context.Context) (*sops.Keys, error) { read++; return nil, errors.New("unreadable") }
	res, err := Prepare(t.Context(), in, Options{Decryption: Decryption{Keys: keys}})
	if err != nil || res.Bundle != in || res.Decrypted != in || res.Redactor != nil || read != 0 {
		t.Errorf("got %v, same bundle %v, redactor %v, keys read %d times; want the bundle as it is, no key read",
			err, res.Bundle == in, res.Redactor, read)
	}
}

// TestPrepareDecryptFailures: each failure is a DecryptError ending with its hint, terminal
// when only a new source fixes it; the variables are not read after it, and no bundle is
// returned.
func TestPrepareDecryptFailures(t *testing.T) {
	key, wrong := sopsfixture.NewKey(t), sopsfixture.NewKey(t)
	enc := string(sopsfixture.Encrypt(t, []byte(configMapYAML), sopsfixture.DefaultRegex, key.Recipient))
	hints := Hints{NoKeys: "NOKEYS", WrongKey: "WRONGKEY", Invalid: "INVALID", Timeout: "--build-timeout"}
	keysErr := &DecryptError{Err: errors.New("secretRef is required"), Terminal: true}
	cases := []struct {
		name     string
		dec      Decryption
		doc      string
		terminal bool
		want     string // the end of the message
	}{
		{"no keys", Decryption{}, enc, true, "not configured\nNOKEYS"},
		{"keys unreadable", Decryption{Keys: func(context.Context) (*sops.Keys, error) { return nil, errors.New("Secret app/keys: forbidden") }},
			enc, false, "Secret app/keys: forbidden"},
		{"keys refused", Decryption{Keys: func(context.Context) (*sops.Keys, error) { return nil, keysErr }}, enc, true, "secretRef is required"},
		{"wrong key", Decryption{Keys: keysOf(t, wrong.Identity)}, enc, false, "\nWRONGKEY"},
		{"altered", Decryption{Keys: keysOf(t, key.Identity)}, strings.Replace(enc, "name: cfg", "name: cfg\n    labels: {a: b}", 1), true, "\nINVALID"},
		{"timeout", Decryption{Keys: keysOf(t, key.Identity), Timeout: time.Nanosecond}, enc, false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.dec.Hints = hints
			calls := 0
			res, err := Prepare(t.Context(), bundle(t, tc.doc), Options{Decryption: tc.dec,
				Substitution: &Substitution{Variables: variables(&calls, nil)}})
			var de *DecryptError
			if !errors.As(err, &de) || de.Terminal != tc.terminal {
				t.Fatalf("err = %#v, want a DecryptError, terminal %v", err, tc.terminal)
			}
			if !strings.HasSuffix(err.Error(), tc.want) {
				t.Errorf("message %q does not end with %q", err, tc.want)
			}
			if tc.name == "timeout" && !strings.HasPrefix(err.Error(), "decryption did not finish within 1ns (--build-timeout): ") {
				t.Errorf("message %q does not say the timeout and its setting", err)
			}
			if tc.name == "keys refused" && de != keysErr {
				t.Errorf("the DecryptError of Keys was not returned as it is: %#v", err)
			}
			if res.Bundle != nil || calls != 0 || strings.Contains(err.Error(), plaintext) {
				t.Errorf("bundle %v, variables read %d times, message %q: want no bundle, no read, no plaintext", res.Bundle, calls, err)
			}
		})
	}
}

// TestPrepareKeepsEncrypted: without keys, KeepEncrypted returns the encrypted objects as
// they are (for printing masked).
func TestPrepareKeepsEncrypted(t *testing.T) {
	key := sopsfixture.NewKey(t)
	in := bundle(t, string(sopsfixture.Encrypt(t, []byte(configMapYAML), sopsfixture.DefaultRegex, key.Recipient)))
	res, err := Prepare(t.Context(), in, Options{Decryption: Decryption{KeepEncrypted: true}})
	if err != nil || res.Bundle != in || res.Decrypted != in {
		t.Errorf("got %v, same bundle %v; want the rendered bundle", err, res.Bundle == in)
	}
}

// TestPrepareRedactsWhatWasReadBeforeAFailure: the values of a Secret read before the
// variables failed are redacted, as read and as substituted, and the kept result is
// dropped; the error is returned as it is.
func TestPrepareRedactsWhatWasReadBeforeAFailure(t *testing.T) {
	m := &Memo{}
	in := refBundle("main@sha1:1")
	if _, err := substitute(m, in, map[string]string{"v": "one"}, false); err != nil || !m.kept {
		t.Fatalf("first substitution: %v, kept %v", err, m.kept)
	}
	readErr := errors.New("spec.postBuild.substituteFrom[1]: ConfigMap app/more: forbidden")
	calls := 0
	res, err := Prepare(t.Context(), in, Options{Substitution: &Substitution{Memo: m, Setting: "spec.postBuild", Variables: variables(&calls, readErr,
		varsubst.Source{Name: "Secret app/vars", Values: map[string]string{"token": "hunter2-token\n"}, Sensitive: true})}})
	if !errors.Is(err, readErr) || err.Error() != readErr.Error() || res.Bundle != nil {
		t.Fatalf("err = %v, bundle %v; want the read error as it is and no bundle", err, res.Bundle)
	}
	if got := res.Redactor.String("a hunter2-token\n b hunter2-token"); got != "a *** b ***" {
		t.Errorf("redacted %q", got)
	}
	if m.kept {
		t.Error("the kept result survived a failed read of the variables")
	}
}

// TestPrepareRedactsDecryptedValuesAsSubstituted: a decrypted value that holds a variable
// is redacted as it is applied, after substitution, too: an API server error about the
// object quotes that form.
func TestPrepareRedactsDecryptedValuesAsSubstituted(t *testing.T) {
	key := sopsfixture.NewKey(t)
	doc := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n  namespace: app\ndata:\n  token: tok-${tier}-" + plaintext + "\n"
	in := bundle(t, string(sopsfixture.Encrypt(t, []byte(doc), sopsfixture.DefaultRegex, key.Recipient)))
	calls := 0
	res, err := Prepare(t.Context(), in, Options{
		Decryption:   Decryption{Keys: keysOf(t, key.Identity)},
		Substitution: &Substitution{Variables: variables(&calls, nil, varsubst.Source{Name: "spec.postBuild.substitute", Values: map[string]string{"tier": "gold"}})},
	})
	if err != nil {
		t.Fatal(err)
	}
	applied := value(t, res.Bundle.Objects[0], "token")
	if applied != "tok-gold-"+plaintext {
		t.Fatalf("token = %q", applied)
	}
	if got := res.Redactor.String(`data.token: Invalid value: "` + applied + `"`); strings.Contains(got, plaintext) {
		t.Errorf("the decrypted value as substituted is written: %q", got)
	}
}

// TestPrepareOwnsOnlyWhatNoStepChanged: the prepared Bundle owns (Bundle.Own) the rendered
// objects no step changed, never a decrypted or substituted one (a Memo keeps those for
// later runs, and they share maps with the objects they replaced), on a Memo's miss and
// hit alike; common metadata makes every object anew; a render that owns nothing gives a
// result that owns nothing.
func TestPrepareOwnsOnlyWhatNoStepChanged(t *testing.T) {
	key := sopsfixture.NewKey(t)
	docs := []string{plainYAML, string(sopsfixture.Encrypt(t, []byte(configMapYAML), sopsfixture.DefaultRegex, key.Recipient)),
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: untouched, namespace: app}\ndata: {a: b}\n"}
	owned := func() *sources.Bundle {
		b := bundle(t, docs...)
		b.Key, b.Own = "render-1", []bool{true, true, true}
		return b
	}
	calls := 0
	opts := Options{
		Decryption: Decryption{Keys: keysOf(t, key.Identity), Memo: &Memo{}},
		Substitution: &Substitution{Variables: variables(&calls, nil,
			varsubst.Source{Name: "spec.postBuild.substitute", Values: map[string]string{"tier": "gold", "host": "h"}}), Memo: &Memo{}},
	}
	for _, run := range []string{"first run", "memo hit"} {
		in := owned()
		res, err := Prepare(t.Context(), in, opts)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]bool{false, false, true}, res.Bundle.Own); diff != "" {
			t.Errorf("%s: Own (-want +got):\n%s", run, diff)
		}
		if res.Bundle.Objects[2] != in.Objects[2] {
			t.Errorf("%s: the untouched object is not the rendered one", run)
		}
		if diff := cmp.Diff([]bool{true, true, true}, in.Own); diff != "" {
			t.Errorf("%s: the rendered Bundle's Own changed (-want +got):\n%s", run, diff)
		}
	}
	withMetadata := opts
	withMetadata.Metadata = &Metadata{Labels: map[string]string{"team": "a"}}
	res, err := Prepare(t.Context(), owned(), withMetadata)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]bool{false, false, false}, res.Bundle.Own); diff != "" {
		t.Errorf("with common metadata: Own (-want +got):\n%s", diff)
	}
	in := bundle(t, docs...)
	if res, err = Prepare(t.Context(), in, opts); err != nil {
		t.Fatal(err)
	}
	if res.Bundle.Own != nil {
		t.Errorf("a render that owns nothing: Own %v, want nil", res.Bundle.Own)
	}
}
