package pipeline

import (
	"context"
	"crypto/sha256"
	"fmt"

	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/sources/varsubst"
)

// Substitution says where the variables of a Bundle come from and how they are
// substituted (varsubst.Expand).
type Substitution struct {
	// Variables returns the variable sources in order, a later one winning over an earlier
	// one. It is called once decryption succeeded. The values of its Sensitive sources are
	// redacted, those returned with an error too (they were read). Its error is returned
	// as it is: it names what it could not read. nil: no variable.
	Variables func(ctx context.Context) ([]varsubst.Source, error)
	// Strict makes a variable without a value and without a default an error.
	Strict bool
	// MaxObjectSize and MaxTotalSize bound what substitution inserts, as varsubst.Options.
	MaxObjectSize, MaxTotalSize int64
	// Setting names where the substitution is configured ("spec.postBuild"), before the
	// errors of merging and substituting; empty: nothing.
	Setting string
	// Memo keeps the last result for the next Prepare of the same caller; nil: none.
	Memo *Memo
}

// run substitutes the variables in b and returns the result and the values to redact,
// also with an error. On error the Memo keeps nothing: what it kept may be out of date.
func (s *Substitution) run(ctx context.Context, b *sources.Bundle) (*sources.Bundle, []string, error) {
	var srcs []varsubst.Source
	var err error
	if s.Variables != nil {
		srcs, err = s.Variables(ctx)
	}
	sensitive := sensitiveValues(srcs)
	if err != nil {
		s.Memo.drop()
		return nil, sensitive, err
	}
	vars, err := varsubst.Merge(srcs...)
	if err != nil {
		s.Memo.drop()
		return nil, sensitive, s.wrap(err)
	}
	opts := varsubst.DefaultOptions()
	opts.Strict, opts.MaxObjectSize, opts.MaxTotalSize = s.Strict, s.MaxObjectSize, s.MaxTotalSize
	fp := vars.Fingerprint()
	if opts.Strict {
		fp = sha256.Sum256(append(fp[:], "strict"...))
	}
	if out := s.Memo.lookup(b, fp); out != nil {
		return derive(b, out, fp), sensitive, nil
	}
	out, err := varsubst.Expand(b, vars, opts)
	if err != nil { // lookup dropped the kept result: nothing to reuse is left
		return nil, sensitive, s.wrap(err)
	}
	out = derive(b, out, fp)
	s.Memo.keep(b, fp, out)
	return out, sensitive, nil
}

func (s *Substitution) wrap(err error) error {
	if s.Setting == "" {
		return err
	}
	return fmt.Errorf("%s: %w", s.Setting, err)
}

// sensitiveValues are the values of the Sensitive sources of srcs, both as read and as
// substituted (a value ending in a newline, as kubectl create secret --from-file stores
// it, lands without it).
func sensitiveValues(srcs []varsubst.Source) []string {
	var out []string
	for _, src := range srcs {
		if !src.Sensitive {
			continue
		}
		for _, v := range src.Values {
			out = append(out, v, varsubst.Clean(v))
		}
	}
	return out
}
