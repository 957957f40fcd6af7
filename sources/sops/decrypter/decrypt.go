package decrypter

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	gosops "github.com/getsops/sops/v3"
	"github.com/getsops/sops/v3/aes"
	sopsage "github.com/getsops/sops/v3/age"
	"github.com/getsops/sops/v3/config"
	"github.com/getsops/sops/v3/keyservice"
	"github.com/getsops/sops/v3/stores/dotenv"
	"github.com/getsops/sops/v3/stores/ini"
	sopsjson "github.com/getsops/sops/v3/stores/json"
	sopsyaml "github.com/getsops/sops/v3/stores/yaml"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/sources/sops/internal/wire"
)

var (
	errKey       = wire.ErrKey
	errIntegrity = wire.ErrIntegrity
)

// maxAgeKeySize bounds one age-encrypted data key (its armored age file): one recipient
// stanza takes about 300 bytes, and a file of many stanzas is as costly as many keys.
const maxAgeKeySize = 4 << 10

// decryptObject decrypts one object. With doc, the source document the object was
// rendered from as written (the MAC hashes values in field order, which the rendered map
// has lost), doc is decrypted and its MAC verified as sops does, and each ciphertext of the
// rendered object is replaced by the plaintext at the same path of doc, after checking it
// is the same ciphertext: what kustomize added or changed around the encrypted values
// (namespace, labels, name prefix) is kept, and no value the MAC did not cover is let in.
// Without doc, the object itself is decrypted from its JSON, whose keys are sorted. It
// returns the decrypted object, or the Secret data entry that failed ("data.<key>", or
// "" for the object) and why.
func decryptObject(o *unstructured.Unstructured, doc []byte, ids sopsage.ParsedIdentities) (*unstructured.Unstructured, string, error) {
	svc := []keyservice.KeyServiceClient{keyservice.NewCustomLocalClient(ageServer{ids: ids})}
	if wire.WholeEncrypted(o) {
		in, format := doc, "yaml"
		if in == nil {
			var err error
			if in, err = o.MarshalJSON(); err != nil {
				return nil, "", fmt.Errorf("%w: %w", errIntegrity, err)
			}
			format = "json"
		}
		plain, err := decryptFile(in, format, "json", svc)
		if err != nil {
			return nil, "", err
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(plain); err != nil {
			return nil, "", fmt.Errorf("%w: decrypted object does not decode: %w", errIntegrity, errWithheld)
		}
		if doc == nil {
			return u, "", nil
		}
		var enc map[string]any
		if err := yaml.Unmarshal(doc, &enc); err != nil {
			return nil, "", fmt.Errorf("%w: the encrypted document does not decode", errIntegrity)
		}
		if err := sameObject(o, enc); err != nil {
			return nil, "", fmt.Errorf("%w: %w", errIntegrity, err)
		}
		out := o.DeepCopy()
		delete(out.Object, "sops")
		if err := fill(out.Object, enc, u.Object, ""); err != nil {
			return nil, "", fmt.Errorf("%w: %w", errIntegrity, err)
		}
		if err := allKept(o.Object, enc, ""); err != nil {
			return nil, "", fmt.Errorf("%w: %w", errIntegrity, err)
		}
		return out, "", nil
	}
	u := o.DeepCopy()
	data, _, _ := unstructured.NestedMap(u.Object, "data")
	for _, k := range wire.EncryptedEntries(o) {
		raw, _ := base64.StdEncoding.DecodeString(data[k].(string))
		plain, err := decryptFile(raw, wire.EntryFormat(raw), formatForKey(k), svc)
		if err != nil {
			return nil, "data." + k, err
		}
		data[k] = base64.StdEncoding.EncodeToString(plain)
	}
	if err := unstructured.SetNestedMap(u.Object, data, "data"); err != nil {
		return nil, "", err
	}
	return u, "", nil
}

// sameObject refuses a rendered object that is not the one the encrypted document declares:
// its apiVersion and kind must be the document's, and its name the document's (a
// kustomization may add a prefix or a suffix). The MAC covers those fields (sops hashes every
// value unless mac_only_encrypted is set), so a ciphertext copied with its sops block into
// another object (a ConfigMap a wider audience may read) is not decrypted there.
func sameObject(o *unstructured.Unstructured, enc map[string]any) error {
	apiVersion, _ := enc["apiVersion"].(string)
	kind, _ := enc["kind"].(string)
	name, _, _ := unstructured.NestedString(enc, "metadata", "name")
	if apiVersion != o.GetAPIVersion() || kind != o.GetKind() || name == "" || !strings.Contains(o.GetName(), name) {
		return fmt.Errorf("the encrypted document is %s %s %q, not this %s %s: encrypted values are decrypted only in the object they were encrypted in",
			apiVersion, kind, name, o.GetAPIVersion(), o.GetKind())
	}
	return nil
}

// allKept refuses a rendered object (rendered, with its ciphertexts) in which a ciphertext
// of the encrypted document enc is missing or was replaced, by a kustomize patch for
// example: the MAC covers the document's values, so a value put in the place of an encrypted
// one was not written by whoever holds the key. The sops block itself is not compared.
func allKept(rendered, enc map[string]any, path string) error {
	for k, ev := range enc {
		if path == "" && k == "sops" {
			continue
		}
		p := path + "." + k
		switch e := ev.(type) {
		case string:
			if strings.HasPrefix(e, "ENC[") {
				if rv, _ := rendered[k].(string); rv != e {
					return fmt.Errorf("%s: the encrypted value was replaced or removed after encryption", p)
				}
			}
		case map[string]any:
			rm, _ := rendered[k].(map[string]any)
			if err := allKept(rm, e, p); err != nil {
				return err
			}
		case []any:
			rl, _ := rendered[k].([]any)
			for i, item := range e {
				var r any
				if i < len(rl) {
					r = rl[i]
				}
				if err := allKept(map[string]any{"": r}, map[string]any{"": item}, fmt.Sprintf("%s[%d]", p, i)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// fill replaces each ciphertext of rendered (at path) by the value at the same path of
// plain, when enc holds the same ciphertext there.
func fill(rendered, enc, plain map[string]any, path string) error {
	for k, v := range rendered {
		p := path + "." + k
		switch rv := v.(type) {
		case string:
			if !strings.HasPrefix(rv, "ENC[") {
				continue
			}
			if ev, ok := enc[k].(string); !ok || ev != rv {
				return fmt.Errorf("%s: the ciphertext is not the one of the encrypted document", p)
			}
			rendered[k] = plain[k]
		case map[string]any:
			em, _ := enc[k].(map[string]any)
			pm, _ := plain[k].(map[string]any)
			if err := fill(rv, em, pm, p); err != nil {
				return err
			}
		case []any:
			el, _ := enc[k].([]any)
			pl, _ := plain[k].([]any)
			for i, item := range rv {
				wrap := map[string]any{"": item}
				var ei, pi any
				if i < len(el) && i < len(pl) {
					ei, pi = el[i], pl[i]
				}
				if err := fill(wrap, map[string]any{"": ei}, map[string]any{"": pi}, fmt.Sprintf("%s[%d]", p, i)); err != nil {
					return err
				}
				rv[i] = wrap[""]
			}
		}
	}
	return nil
}

// formatForKey is the format a decrypted Secret entry is written in, from its name, as
// sops and Flux choose it (.dockerconfigjson is JSON).
func formatForKey(key string) string {
	switch {
	case strings.HasSuffix(key, ".yaml"), strings.HasSuffix(key, ".yml"):
		return "yaml"
	case strings.HasSuffix(key, ".json"), strings.HasSuffix(key, ".dockerconfigjson"):
		return "json"
	case strings.HasSuffix(key, ".env"):
		return "dotenv"
	case strings.HasSuffix(key, ".ini"):
		return "ini"
	}
	return "binary"
}

// store is the part of a sops store Decrypt uses.
type store interface {
	LoadEncryptedFile(in []byte) (gosops.Tree, error)
	EmitPlainFile(in gosops.TreeBranches) ([]byte, error)
}

func storeFor(format string) store {
	switch format {
	case "yaml":
		return sopsyaml.NewStore(&config.YAMLStoreConfig{})
	case "dotenv":
		return dotenv.NewStore(&config.DotenvStoreConfig{})
	case "ini":
		return ini.NewStore(&config.INIStoreConfig{})
	case "binary":
		return sopsjson.NewBinaryStore(&config.JSONBinaryStoreConfig{})
	}
	return sopsjson.NewStore(&config.JSONStoreConfig{})
}

// decryptFile decrypts one SOPS document and verifies its MAC. Its errors wrap errKey or
// errIntegrity and carry no value: sops' own messages name keys and paths, not data.
func decryptFile(in []byte, inFormat, outFormat string, svc []keyservice.KeyServiceClient) (out []byte, err error) {
	defer func() {
		// Malformed input has made sops panic before (Flux recovers here too).
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("%w: malformed SOPS document", errIntegrity)
		}
	}()
	tree, err := storeFor(inFormat).LoadEncryptedFile(in)
	if err != nil {
		return nil, fmt.Errorf("%w: SOPS metadata does not load: %w", errIntegrity, userErr(err))
	}
	if err := boundKeys(tree.Metadata); err != nil {
		return nil, err
	}
	dataKey, err := tree.Metadata.GetDataKeyWithKeyServices(svc, gosops.DefaultDecryptionOrder)
	if err != nil {
		return nil, fmt.Errorf("%w (encrypted for %s): %w", errKey, recipients(tree.Metadata), userErr(err))
	}
	cipher := aes.NewCipher()
	mac, err := tree.Decrypt(dataKey, cipher)
	if err != nil {
		return nil, fmt.Errorf("%w: a value does not decrypt (altered ciphertext?): %w", errIntegrity, errWithheld)
	}
	stored, err := cipher.Decrypt(tree.Metadata.MessageAuthenticationCode, dataKey, tree.Metadata.LastModified.Format(time.RFC3339))
	if err != nil {
		return nil, fmt.Errorf("%w: the MAC does not decrypt (altered metadata?)", errIntegrity)
	}
	// The MACs are hashes of the plaintext: they stay out of the message.
	if stored != mac {
		return nil, fmt.Errorf("%w: the MAC does not match the content: a value was added, removed or changed in "+
			"the file after it was encrypted (edit it with sops, not by hand)", errIntegrity)
	}
	out, err = storeFor(outFormat).EmitPlainFile(tree.Branches)
	if err != nil {
		return nil, fmt.Errorf("%w: decrypted document does not print as %s", errIntegrity, outFormat)
	}
	return out, nil
}

// boundKeys refuses a document encrypted for more than wire.MaxRecipients keys, or with an age
// data key larger than maxAgeKeySize, before any key is tried.
func boundKeys(m gosops.Metadata) error {
	n := 0
	for _, g := range m.KeyGroups {
		n += len(g)
		for _, k := range g {
			if ak, ok := k.(*sopsage.MasterKey); ok && len(ak.EncryptedKey) > maxAgeKeySize {
				return fmt.Errorf("%w: an age data key of %d bytes (at most %d: one recipient each)", errIntegrity, len(ak.EncryptedKey), maxAgeKeySize)
			}
		}
	}
	if n > wire.MaxRecipients {
		return fmt.Errorf("%w: encrypted for %d keys, at most %d are tried", errIntegrity, n, wire.MaxRecipients)
	}
	return nil
}

// recipients lists the public identities an object is encrypted for, so a wrong-key error
// says which key is needed.
func recipients(m gosops.Metadata) string {
	var r []string
	for _, g := range m.KeyGroups {
		for _, k := range g {
			r = append(r, k.TypeToIdentifier()+" "+k.ToString())
		}
	}
	if len(r) == 0 {
		return "no key"
	}
	return strings.Join(r, ", ")
}

// userErr prefers sops' user-facing message (it lists each key group's failure).
func userErr(err error) error {
	var u gosops.UserError
	if errors.As(err, &u) {
		return errors.New(strings.TrimSpace(u.UserError()))
	}
	return err
}

// errWithheld replaces a message that could quote decrypted content (a decode error of the
// plaintext, say), keeping only that it failed.
var errWithheld = errors.New("details withheld: they could quote decrypted content")

// ageServer is a sops key service that decrypts data keys with the given age identities
// only: sops' own local server would read the process environment and home folder
// (SOPS_AGE_KEY_FILE, ~/.config/sops/age), which are the daemon's, not the tenant's.
type ageServer struct {
	ids sopsage.ParsedIdentities
}

func (s ageServer) Encrypt(context.Context, *keyservice.EncryptRequest) (*keyservice.EncryptResponse, error) {
	return nil, errors.New("encryption is not supported")
}

func (s ageServer) Decrypt(_ context.Context, req *keyservice.DecryptRequest) (*keyservice.DecryptResponse, error) {
	k := req.GetKey().GetAgeKey()
	if k == nil {
		return nil, errors.New("only age keys are supported")
	}
	if len(s.ids) == 0 {
		return nil, errors.New("no age identity given")
	}
	mk := &sopsage.MasterKey{Recipient: k.GetRecipient(), EncryptedKey: string(req.GetCiphertext())}
	s.ids.ApplyToMasterKey(mk)
	plain, err := mk.Decrypt()
	if err != nil {
		return nil, err
	}
	return &keyservice.DecryptResponse{Plaintext: plain}, nil
}
