package sops

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/sources/sops/internal/wire"
)

// Options bound one decryption beside its context.
type Options struct {
	// MaxMemory is the decryption program's memory budget; zero: DefaultMaxMemory.
	MaxMemory int64
	// MemorySetting names the setting of MaxMemory in the error of a decryption that
	// needed more ("--render-memory-limit"); empty: none is named.
	MemorySetting string
	// Slot, when set, is taken while the decryption program runs (a render slot: see
	// sources.AcquireRenderSlot) and given back by the func it returns.
	Slot func(ctx context.Context) (release func(), err error)
}

// DefaultMaxMemory is the decryption program's default memory budget: a render child's
// (sources.DefaultMaxRenderMemory). Decrypting takes a few times the size of the encrypted
// objects, which the render's limits already bound.
const DefaultMaxMemory = 64 << 20

// Decrypt is DecryptWith with the default Options.
func Decrypt(ctx context.Context, b *sources.Bundle, keys *Keys) (*sources.Bundle, error) {
	return DecryptWith(ctx, b, keys, Options{})
}

// DecryptWith returns b with every encrypted object decrypted with keys; keys nil means
// decryption is not configured, and any encrypted object is an error (ErrNotConfigured).
// b is not modified: the result is a new Bundle whose Objects slice holds the decrypted
// objects and b's own pointers for the others. When nothing is encrypted b itself is
// returned, and no program is started. The MAC is always verified. Every failing object is
// reported (errors.Join of *ObjectError, in the order of b); on error the Bundle is nil,
// so nothing can be applied.
//
// The encrypted objects are decrypted by the decryption program (see program), in one
// child process per call, stopped when ctx ends and bounded in memory (opts) and in the
// size of its answer. When it cannot run or gives no answer the error wraps ErrNoProgram,
// ErrProgram or ErrLimit and names the objects.
func DecryptWith(ctx context.Context, b *sources.Bundle, keys *Keys, opts Options) (*sources.Bundle, error) {
	errs := make([]error, len(b.Objects))
	var todo []int
	for i, o := range b.Objects {
		switch {
		case wire.SplitDotenv(o):
			errs[i] = &ObjectError{Object: sources.ObjectID(o), Origin: origin(b, i), Err: ErrUnsupported}
		case !wire.Encrypted(o):
		case keys == nil:
			errs[i] = &ObjectError{Object: sources.ObjectID(o), Origin: origin(b, i), Err: ErrNotConfigured}
		default:
			todo = append(todo, i)
		}
	}
	if err := ctx.Err(); err != nil && len(todo) > 0 {
		return nil, fmt.Errorf("decryption stopped: %w", context.Cause(ctx))
	}
	var out *sources.Bundle
	if len(todo) > 0 && keys != nil {
		results, err := runProgram(ctx, b, todo, keys, opts)
		if err != nil {
			return nil, fmt.Errorf("decrypting %s: %w", describe(b, todo), err)
		}
		for n, i := range todo {
			r := results[n]
			if err := r.Err(); err != nil {
				errs[i] = &ObjectError{Object: sources.ObjectID(b.Objects[i]), Origin: origin(b, i), Entry: r.Entry, Err: err}
				continue
			}
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON(r.Object); err != nil {
				errs[i] = &ObjectError{Object: sources.ObjectID(b.Objects[i]), Origin: origin(b, i),
					Err: fmt.Errorf("%w: the decrypted object does not decode", ErrProgram)}
				continue
			}
			if out == nil {
				c := *b
				c.Objects = append([]*unstructured.Unstructured(nil), b.Objects...)
				out = &c
			}
			out.Objects[i] = u
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if out == nil {
		return b, nil
	}
	return out, nil
}

func origin(b *sources.Bundle, i int) string {
	if i < len(b.Origins) {
		return b.Origins[i]
	}
	return ""
}

// describe names the objects of b at idx, at most three.
func describe(b *sources.Bundle, idx []int) string {
	s := ""
	for n, i := range idx {
		if n == 3 {
			return fmt.Sprintf("%s and %d more encrypted objects", s, len(idx)-3)
		}
		if n > 0 {
			s += ", "
		}
		s += sources.ObjectID(b.Objects[i])
		if o := origin(b, i); o != "" {
			s += " (" + o + ")"
		}
	}
	return s
}
