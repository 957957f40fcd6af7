package sops

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/converge-dev/converge/e2e/sopsfixture"
)

// TestDecryptHoldsItsSlot: the decryption program runs holding the slot of Options.Slot
// (the daemon's render slots), given back when it ends; a decryption that cannot get one
// before its context ends starts no program and says so. No slot is taken when nothing is
// encrypted.
func TestDecryptHoldsItsSlot(t *testing.T) {
	key := sopsfixture.NewKey(t)
	in := bundle(t, sopsfixture.Encrypt(t, []byte(configMapYAML), sopsfixture.DefaultRegex, key.Recipient))
	taken, held := 0, 0
	slot := func(context.Context) (func(), error) {
		taken++
		held++
		return func() { held-- }, nil
	}
	if _, err := DecryptWith(t.Context(), in, keysOf(t, key.Identity), Options{Slot: slot}); err != nil {
		t.Fatal(err)
	}
	if taken != 1 || held != 0 {
		t.Errorf("slot taken %d times, %d still held; want taken once and given back", taken, held)
	}
	plain := bundle(t, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: plain, namespace: app}\n"))
	if _, err := DecryptWith(t.Context(), plain, keysOf(t, key.Identity), Options{Slot: slot}); err != nil || taken != 1 {
		t.Errorf("nothing encrypted: err %v, slot taken %d times; want no slot taken", err, taken)
	}

	// The program would fail loudly if started: the slot's error comes first.
	t.Setenv(ProgramEnv, filepath.Join(t.TempDir(), "started-marker"))
	if err := os.WriteFile(os.Getenv(ProgramEnv), []byte("#!/bin/sh\nexit 9\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	busy := errors.New("all render slots busy until the deadline")
	_, err := DecryptWith(t.Context(), in, keysOf(t, key.Identity), Options{Slot: func(context.Context) (func(), error) { return nil, busy }})
	if !errors.Is(err, busy) || !strings.Contains(err.Error(), "ConfigMap app/cfg") || !strings.Contains(err.Error(), "decryption did not start") {
		t.Errorf("err = %v, want the slot's error naming ConfigMap app/cfg", err)
	}
}
