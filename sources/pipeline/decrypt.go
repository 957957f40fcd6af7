package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/sources/sops"
)

// Decryption says how the SOPS-encrypted objects of a Bundle are decrypted. The zero
// value refuses any encrypted object.
type Decryption struct {
	// Keys returns the age identities to decrypt with. It is called only when an object is
	// encrypted, so a source without secrets costs no read of keys. nil: no keys are
	// configured, and an encrypted object is refused (or kept, with KeepEncrypted). An
	// error it returns is returned as it is when it is a *DecryptError, and otherwise as a
	// DecryptError that is not Terminal (reading keys may work the next time).
	Keys func(ctx context.Context) (*sops.Keys, error)
	// KeepEncrypted keeps encrypted objects as they are when no Keys are configured, for a
	// caller that prints them masked instead of applying them.
	KeepEncrypted bool
	// Timeout bounds the decryption (not Keys); zero: ctx alone.
	Timeout time.Duration
	// MaxMemory bounds the memory of the decryption program; zero: sops.DefaultMaxMemory.
	MaxMemory int64
	// Slot, when set, is taken while the decryption program runs (sops.Options.Slot).
	Slot func(ctx context.Context) (release func(), err error)
	// Hints end the error of each failure with a line saying what to do.
	Hints Hints
	// Memo keeps the last decryption for the next run of the same caller: the same
	// render (Bundle.Key) with the same keys reuses it, without starting
	// the decryption program or taking a render slot (every interval and drift reconcile
	// between commits). nil: none.
	Memo *Memo
}

// Hints are the lines that end decryption errors, naming where the user fixes each
// failure; an empty hint adds nothing.
type Hints struct {
	// NoKeys follows the refusal of encrypted objects when no Keys are configured.
	NoKeys string
	// WrongKey follows a failure because no key given opens an object (sops.ErrKey).
	WrongKey string
	// Invalid follows any other failure of an object (a broken MAC, an unsupported form).
	Invalid string
	// Timeout names the setting of Decryption.Timeout in the error of a decryption that
	// did not finish within it.
	Timeout string
	// Memory names the setting of Decryption.MaxMemory in the error of a decryption that
	// needed more.
	Memory string
}

// DecryptError is a failure to decrypt a Bundle.
type DecryptError struct {
	Err error
	// Terminal says only a new source fixes it (an encrypted object without keys
	// configured, an object that cannot be decrypted with any key, a decryption over its
	// memory or answer bound); otherwise a change of the keys, or another try, may (no key
	// given opens an object, a timeout, a failed read of the keys, the decryption program
	// missing or failing).
	Terminal bool
}

func (e *DecryptError) Error() string { return e.Err.Error() }
func (e *DecryptError) Unwrap() error { return e.Err }

// run returns b with its encrypted objects decrypted; b itself when none is encrypted.
func (d Decryption) run(ctx context.Context, b *sources.Bundle) (*sources.Bundle, error) {
	if !encrypted(b) {
		d.Memo.drop() // the plaintexts of an earlier render are of no further use
		return b, nil
	}
	if d.Keys == nil {
		d.Memo.drop() // no keys any more: the plaintexts kept with the last ones go
		if d.KeepEncrypted {
			return b, nil
		}
		_, err := sops.Decrypt(ctx, b, nil)
		return nil, &DecryptError{Err: withHint(err, d.Hints.NoKeys), Terminal: true}
	}
	keys, err := d.Keys(ctx)
	if err != nil {
		d.Memo.drop()
		var de *DecryptError
		if errors.As(err, &de) {
			return nil, err
		}
		return nil, &DecryptError{Err: err}
	}
	fp := keys.Fingerprint()
	if out := d.Memo.lookup(b, fp); out != nil {
		return derive(b, out, fp), nil
	}
	dctx := ctx
	if d.Timeout > 0 {
		var cancel context.CancelFunc
		dctx, cancel = context.WithTimeout(ctx, d.Timeout)
		defer cancel()
	}
	out, err := sops.DecryptWith(dctx, b, keys, sops.Options{MaxMemory: d.MaxMemory, MemorySetting: d.Hints.Memory, Slot: d.Slot})
	if err != nil {
		d.Memo.drop()
	}
	switch {
	case err == nil:
		out = derive(b, out, fp)
		d.Memo.keep(b, fp, out)
		return out, nil
	case ctx.Err() == nil && errors.Is(dctx.Err(), context.DeadlineExceeded):
		return nil, &DecryptError{Err: fmt.Errorf("decryption did not finish within %s%s: %w", d.Timeout, setting(d.Hints.Timeout), err)}
	case errors.Is(err, sops.ErrKey):
		// A wrong key is fixed in the keys, not in the source.
		return nil, &DecryptError{Err: withHint(err, d.Hints.WrongKey)}
	case errors.Is(err, sops.ErrNoProgram), errors.Is(err, sops.ErrProgram):
		// Installing the program, or another try, may fix it: the source may be fine.
		return nil, &DecryptError{Err: err}
	}
	return nil, &DecryptError{Err: withHint(err, d.Hints.Invalid), Terminal: true}
}

// encrypted reports whether an object of b is SOPS-encrypted.
func encrypted(b *sources.Bundle) bool {
	for _, o := range b.Objects {
		if sops.Encrypted(o) {
			return true
		}
	}
	return false
}

func withHint(err error, hint string) error {
	if hint == "" {
		return err
	}
	return fmt.Errorf("%w\n%s", err, hint)
}

func setting(name string) string {
	if name == "" {
		return ""
	}
	return " (" + name + ")"
}
