package sops

import (
	"strings"
	"testing"

	"filippo.io/age"
	"filippo.io/age/plugin"
	sopsage "github.com/getsops/sops/v3/age"
)

// TestKeysAcceptWhatSopsAccepts: Keys checks identities without sops (the daemon links no
// sops package), and the decryption program parses them again with sops: both must accept
// and refuse the same lines, or a key the daemon took would fail every object, or one
// sops takes would be refused.
func TestKeysAcceptWhatSopsAccepts(t *testing.T) {
	x, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	pq, err := age.GenerateHybridIdentity()
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]struct {
		line string
		ok   bool
	}{
		"x25519":            {x.String(), true},
		"hybrid":            {pq.String(), true},
		"plugin":            {strings.ToUpper(plugin.EncodeIdentity("yubikey", []byte("slot-1"))), true},
		"comment and blank": {"# created: now\n\n" + x.String(), true},
		"x25519 damaged":    {x.String()[:len(x.String())-2] + "QQ", false},
		"x25519 truncated":  {x.String()[:30], false},
		"unknown type":      {"AGE-SECRET-KEY-2QQQQQ", false},
		"ssh key":           {"-----BEGIN OPENSSH PRIVATE KEY-----", false},
		"trailing space":    {x.String() + " ", false},
		"two on one line":   {x.String() + " " + x.String(), false},
		"lowercase x25519":  {strings.ToLower(x.String()), false},
	}
	for name, tc := range lines {
		t.Run(name, func(t *testing.T) {
			line := tc.line
			keysErr := (&Keys{}).AddAge("test", []byte(line+"\n"))
			var ids sopsage.ParsedIdentities
			sopsErr := ids.Import(line)
			if (keysErr == nil) != tc.ok || (sopsErr == nil) != tc.ok {
				t.Errorf("Keys: %v; sops: %v; want both to accept (%v) or both to refuse", keysErr, sopsErr, tc.ok)
			}
		})
	}
}
