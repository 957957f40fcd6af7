package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/converge-dev/converge/e2e/sopsfixture"
	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/sources/sops"
)

// hostileBundle is an encrypted ConfigMap whose document as written holds a million
// more entries: 13 MB of YAML, each entry a few bytes that the request's and sops' decoders
// turn into hundreds, over 300 MiB before the MAC is checked (and sops' YAML store takes
// time quadratic in the entries of a map: minutes past 100,000).
func hostileBundle(t *testing.T, recipient string, entries int) *sources.Bundle {
	t.Helper()
	enc := string(sopsfixture.Encrypt(t, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big\n  namespace: app\ndata:\n  v: x\n"),
		sopsfixture.DefaultRegex, recipient))
	b := bundle(t, enc)
	var doc strings.Builder
	i := strings.Index(enc, "data:\n") + len("data:\n")
	doc.WriteString(enc[:i])
	for n := range entries {
		fmt.Fprintf(&doc, "    k%d: x\n", n)
	}
	doc.WriteString(enc[i:])
	b.Ordered[0] = []byte(doc.String())
	return b
}

// TestDecryptionProgramFailures: the decryption program is a tenant-input path bounded in
// time, memory and answer size, and one that is missing or killed loses nothing. Each
// failure is a DecryptError naming the objects and what it hit, terminal only when the
// content is at fault, with no bundle: nothing can be applied or pruned.
func TestDecryptionProgramFailures(t *testing.T) {
	key := sopsfixture.NewKey(t)
	enc := func(name string) string {
		return string(sopsfixture.Encrypt(t, []byte(strings.Replace(configMapYAML, "name: cfg", "name: "+name, 1)),
			sopsfixture.DefaultRegex, key.Recipient))
	}
	hints := Hints{WrongKey: "WRONGKEY", Invalid: "INVALID", Timeout: "--build-timeout", Memory: "--render-memory-limit"}
	cases := []struct {
		name     string
		program  string // CONVERGE_DECRYPT_PROGRAM; "": this test binary
		dec      Decryption
		in       *sources.Bundle
		is       error
		terminal bool
		says     []string
	}{
		{"program missing", "/nonexistent/converge-decrypt", Decryption{}, bundle(t, enc("cfg")), sops.ErrNoProgram, false,
			[]string{"decrypting ConfigMap app/cfg (apps/filea.yaml): SOPS decryption needs converge-decrypt next to converge: " +
				"make build builds both, the image ships both (/nonexistent/converge-decrypt not found)"}},
		{"program not absolute", "converge-decrypt", Decryption{}, bundle(t, enc("cfg")), sops.ErrNoProgram, false,
			[]string{`CONVERGE_DECRYPT_PROGRAM="converge-decrypt" is not an absolute path`}},
		{"killed by the timeout", "", Decryption{Timeout: 2 * time.Second}, bundle(t, enc(sopsfixture.HangMarker)), context.DeadlineExceeded, false,
			[]string{"decryption did not finish within 2s (--build-timeout): decrypting ConfigMap app/" + sopsfixture.HangMarker}},
		// 100,000 entries take sops minutes of CPU: decrypted in the daemon's own process, a
		// document was not interrupted by the timeout.
		{"hostile document killed by the timeout", "", Decryption{Timeout: 2 * time.Second}, hostileBundle(t, key.Recipient, 100_000),
			context.DeadlineExceeded, false, []string{"decryption did not finish within 2s (--build-timeout): decrypting ConfigMap app/big"}},
		{"answer over its bound", "", Decryption{}, bundle(t, enc(sopsfixture.FloodMarker)), sops.ErrLimit, true,
			[]string{"ConfigMap app/" + sopsfixture.FloodMarker, "answer exceeded", "\nINVALID"}},
		{"memory limit", "", Decryption{MaxMemory: 16 << 20}, hostileBundle(t, key.Recipient, 1<<20), sops.ErrLimit, true,
			[]string{"ConfigMap app/big", "decryption needed more than its memory limit of 16 MiB (raise it with --render-memory-limit)"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.program != "" {
				t.Setenv(sops.ProgramEnv, tc.program)
			}
			tc.dec.Keys, tc.dec.Hints = keysOf(t, key.Identity), hints
			start := time.Now()
			res, err := Prepare(t.Context(), tc.in, Options{Decryption: tc.dec})
			var de *DecryptError
			if !errors.As(err, &de) || de.Terminal != tc.terminal || !errors.Is(err, tc.is) {
				t.Fatalf("err = %v (%#v), want a DecryptError wrapping %v, terminal %v", err, err, tc.is, tc.terminal)
			}
			for _, s := range tc.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("message %q does not say %q", err, s)
				}
			}
			if res.Bundle != nil {
				t.Error("a bundle was returned with the error: it could be applied")
			}
			// A decryption the timeout did not stop would run for minutes (the hostile
			// document): the bound is thirty times the timeout, not a measure of speed.
			if d := time.Since(start); tc.dec.Timeout > 0 && d > 30*tc.dec.Timeout {
				t.Errorf("the decryption returned after %s, past its %s timeout", d, tc.dec.Timeout)
			}
		})
	}
}

// TestDecryptionProgramNotStartedWithoutEncryptedObjects: a source without encrypted
// objects needs no decryption program, even with keys configured.
func TestDecryptionProgramNotStartedWithoutEncryptedObjects(t *testing.T) {
	t.Setenv(sops.ProgramEnv, "/nonexistent/converge-decrypt")
	key := sopsfixture.NewKey(t)
	in := bundle(t, plainYAML)
	res, err := Prepare(t.Context(), in, Options{Decryption: Decryption{Keys: keysOf(t, key.Identity)}})
	if err != nil || res.Bundle != in {
		t.Fatalf("got %v (same bundle: %v), want the bundle as it is", err, res.Bundle == in)
	}
}
