package sops

import (
	"bufio"
	"crypto/sha256"
	"errors"
	"fmt"
	"sort"
	"strings"

	"filippo.io/age"
	"filippo.io/age/plugin"
)

// AgeKeySuffix marks the entries of a key Secret that hold age identities, Flux's convention.
const AgeKeySuffix = ".agekey"

// ErrNoAgeKey reports a key Secret (or file) that holds no age identity.
var ErrNoAgeKey = errors.New("no age identity")

// Keys are private keys held in memory. The zero value holds none: decryption then fails
// with ErrKey, and never falls back to the process environment (SOPS_AGE_KEY_FILE and the
// like), which belongs to the daemon, not to a tenant.
type Keys struct {
	// age holds the identities as written (AGE-SECRET-KEY-1…), checked: they are handed to
	// the decryption program, which parses them again.
	age []string
}

// AddAge parses an age identity file's content (one AGE-SECRET-KEY-1… a line, "#" comments
// and blank lines ignored) and adds its identities. name says where it came from in errors;
// the content never appears in them.
func (k *Keys) AddAge(name string, data []byte) error {
	ids, err := parseIdentities(string(data))
	if err != nil {
		return fmt.Errorf("%s: not an age identity file: %w", name, redactParse(err))
	}
	if len(ids) == 0 {
		return fmt.Errorf("%s: %w", name, ErrNoAgeKey)
	}
	k.age = append(k.age, ids...)
	return nil
}

// parseIdentities checks each identity of an identity file as sops does (the decryption
// program reads them with sops' own parser): X25519 and post-quantum hybrid identities, and
// plugin identities.
func parseIdentities(data string) ([]string, error) {
	var ids []string
	scanner := bufio.NewScanner(strings.NewReader(data))
	for scanner.Scan() {
		line := scanner.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var err error
		switch {
		case strings.HasPrefix(line, "AGE-PLUGIN-"):
			_, _, err = plugin.ParseIdentity(line)
		case strings.HasPrefix(line, "AGE-SECRET-KEY-PQ-1"):
			_, err = age.ParseHybridIdentity(line)
		case strings.HasPrefix(line, "AGE-SECRET-KEY-1"):
			_, err = age.ParseX25519Identity(line)
		default:
			err = errors.New("unknown identity type")
		}
		if err != nil {
			return nil, fmt.Errorf("failed to parse and add to age identities: %w", err)
		}
		ids = append(ids, line)
	}
	if err := scanner.Err(); err != nil {
		return nil, fmt.Errorf("failed to parse and add to age identities: %w", err)
	}
	return ids, nil
}

// Fingerprint identifies the identities k holds, in order, without revealing them: a
// decryption with the same fingerprint on the same objects gives the same result.
func (k *Keys) Fingerprint() [sha256.Size]byte {
	h := sha256.New()
	if k != nil {
		for _, id := range k.age {
			h.Write([]byte(id))
			h.Write([]byte{0})
		}
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// Len reports how many identities k holds.
func (k *Keys) Len() int {
	if k == nil {
		return 0
	}
	return len(k.age)
}

// KeysFromSecret reads the age identities of a key Secret's data: every entry whose name
// ends in .agekey. A Secret with no such entry is an error, so a typo in an entry name is
// reported where it is made rather than as "no key could decrypt".
func KeysFromSecret(data map[string][]byte) (*Keys, error) {
	names := make([]string, 0, len(data))
	for name := range data {
		names = append(names, name)
	}
	sort.Strings(names)
	k := &Keys{}
	for _, name := range names {
		if !strings.HasSuffix(name, AgeKeySuffix) {
			continue
		}
		if err := k.AddAge("entry "+name, data[name]); err != nil {
			return nil, err
		}
	}
	if k.Len() == 0 {
		return nil, fmt.Errorf("%w: no entry named *%s (entries: %s)", ErrNoAgeKey, AgeKeySuffix, strings.Join(names, ", "))
	}
	return k, nil
}

// redactParse keeps a parse error's shape without the line it failed on: age's errors may
// quote part of the input, which is a private key.
func redactParse(err error) error {
	msg := err.Error()
	if i := strings.Index(msg, "AGE-SECRET-KEY"); i >= 0 {
		msg = msg[:i] + "[redacted]"
	}
	return errors.New(msg)
}
