// Package wire is what the daemon's side of SOPS decryption (package sops) and the
// decryption program (package decrypter, in converge-decrypt) share: the errors whose
// identity crosses the process boundary, how an encrypted object is recognised, and the
// request and answer exchanged on the program's stdin and stdout. It imports no sops
// package, so the daemon links none.
package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

var (
	// ErrNotConfigured reports an encrypted object while no decryption is configured.
	ErrNotConfigured = errors.New("is SOPS-encrypted and decryption is not configured")
	// ErrKey reports that none of the given keys can decrypt an object's data key.
	ErrKey = errors.New("no given key can decrypt it")
	// ErrIntegrity reports an object whose ciphertext or SOPS metadata is damaged or was
	// altered.
	ErrIntegrity = errors.New("SOPS integrity check failed")
	// ErrUnsupported reports a secretGenerator "envs" entry of an encrypted .env file.
	ErrUnsupported = errors.New("holds a SOPS-encrypted .env file split by a secretGenerator (envs); " +
		"list the encrypted file under files instead, or encrypt the Secret itself")
)

// MaxRecipients bounds the keys one SOPS document may be encrypted for. Each is tried in
// turn, so a document of a hostile repository listing thousands would cost the daemon
// seconds of CPU per object; real files list a handful (one key per team or environment).
const MaxRecipients = 32

// kinds name the sentinels on the wire.
var kinds = map[string]error{"notConfigured": ErrNotConfigured, "key": ErrKey, "integrity": ErrIntegrity, "unsupported": ErrUnsupported}

// KindOf returns the wire name of the sentinel err wraps, or "".
func KindOf(err error) string {
	for name, s := range kinds {
		if errors.Is(err, s) {
			return name
		}
	}
	return ""
}

// ChildEnv is set to "1" in the environment of the decryption program: a binary that
// serves as one (converge-decrypt, or a test binary) checks it.
const ChildEnv = "CONVERGE_DECRYPT_CHILD"

// MemoryEnv holds the decryption program's memory budget in bytes, which it sets on itself
// before it reads its request.
const MemoryEnv = "CONVERGE_DECRYPT_MEMORY"

// Request is what the daemon sends on the decryption program's stdin.
type Request struct {
	// Identities are the age identities, one a string (AGE-SECRET-KEY-1…).
	Identities []string `json:"identities"`
	// Objects are the encrypted objects only.
	Objects []Object `json:"objects"`
}

// Object is one encrypted object: as rendered, and the document it was rendered from as
// written (sources.Bundle.Ordered), when the render kept it.
type Object struct {
	Object json.RawMessage `json:"object"`
	Doc    string          `json:"doc,omitempty"`
}

// Answer is what the decryption program writes on its stdout: one Result per requested
// object, in the same order.
type Answer struct {
	Results []Result `json:"results"`
}

// Result is one object's outcome: the decrypted object, or an error.
type Result struct {
	Object json.RawMessage `json:"object,omitempty"`
	// Entry is the Secret data entry that failed ("data.<key>"), if any.
	Entry string `json:"entry,omitempty"`
	// Kind is the wire name of the error's sentinel (KindOf); Message its text.
	Kind    string `json:"kind,omitempty"`
	Message string `json:"message,omitempty"`
}

// Err returns the error r carries, nil when it carries none: its message, unwrapping to
// its sentinel.
func (r Result) Err() error {
	if r.Message == "" && r.Kind == "" {
		return nil
	}
	return &Error{Msg: r.Message, Is: kinds[r.Kind]}
}

// Error is an error decoded from the decryption program: its message, and the sentinel it
// matched there.
type Error struct {
	Msg string
	Is  error
}

func (e *Error) Error() string { return e.Msg }

// Unwrap returns the sentinel.
func (e *Error) Unwrap() error { return e.Is }

// WholeEncrypted reports an object with a top-level "sops" field carrying a MAC.
func WholeEncrypted(o *unstructured.Unstructured) bool {
	mac, found, _ := unstructured.NestedFieldNoCopy(o.Object, "sops", "mac")
	return found && mac != nil && mac != ""
}

// markers are the bytes a SOPS-encrypted file of each format holds (its MAC entry), as
// Flux detects encrypted Secret entries.
var markers = []struct {
	format string
	b      []byte
}{
	{"yaml", []byte("mac: ENC[")},
	{"json", []byte(`"mac": "ENC[`)},
	{"dotenv", []byte("sops_mac=ENC[")},
	{"ini", []byte("[sops]")},
}

// EntryFormat returns the format of a SOPS-encrypted file, or "" when raw is not one.
func EntryFormat(raw []byte) string {
	for _, m := range markers {
		if bytes.Contains(raw, m.b) {
			return m.format
		}
	}
	return ""
}

// EncryptedEntries returns the sorted keys of a Secret's data entries that are SOPS files.
func EncryptedEntries(o *unstructured.Unstructured) []string {
	if o.GetKind() != "Secret" || o.GroupVersionKind().Group != "" || WholeEncrypted(o) {
		return nil
	}
	data, _, _ := unstructured.NestedMap(o.Object, "data")
	var keys []string
	for k, v := range data {
		s, ok := v.(string)
		if !ok {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			continue // not ours to report: the API server will name it
		}
		if EntryFormat(raw) != "" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// SplitDotenv reports a Secret whose entries are the variables of an encrypted .env file:
// sops writes its metadata as sops_* variables, among them sops_mac.
func SplitDotenv(o *unstructured.Unstructured) bool {
	if o.GetKind() != "Secret" || o.GroupVersionKind().Group != "" {
		return false
	}
	v, found, _ := unstructured.NestedString(o.Object, "data", "sops_mac")
	if !found {
		return false
	}
	raw, err := base64.StdEncoding.DecodeString(v)
	return err == nil && bytes.HasPrefix(raw, []byte("ENC["))
}

// Encrypted reports an object decryption applies to (see sops.Encrypted).
func Encrypted(o *unstructured.Unstructured) bool {
	return WholeEncrypted(o) || len(EncryptedEntries(o)) > 0 || SplitDotenv(o)
}

// IsCiphertext reports a SOPS-encrypted value.
func IsCiphertext(v any) bool {
	s, ok := v.(string)
	return ok && strings.HasPrefix(s, "ENC[")
}
