package varsubst

import (
	"cmp"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
)

// Redacted replaces a hidden value.
const Redacted = "***"

// MinRedactLen is the shortest value a Redactor hides. Shorter values are not hidden:
// replacing every "1", "on" or "eu" in a message would make it unreadable while hiding
// nothing a guess would not find; a secret worth the name is longer.
const MinRedactLen = 4

// Redactor replaces known secret values in text written about a Sync or a run (status
// messages, events, log lines, reports, diffs). It matches each value as it is, and as Go
// (%q, which API server errors use) and JSON quote it, without the quotes. A nil Redactor
// changes nothing.
type Redactor struct {
	r *strings.Replacer
}

// NewRedactor hides values of at least MinRedactLen bytes.
func NewRedactor(values []string) *Redactor {
	var forms []string
	for _, v := range values {
		if len(v) < MinRedactLen {
			continue
		}
		q := strconv.Quote(v)
		forms = append(forms, v, q[1:len(q)-1])
		if j, err := json.Marshal(v); err == nil {
			forms = append(forms, string(j[1:len(j)-1]))
		}
	}
	if len(forms) == 0 {
		return nil
	}
	// Longest first: strings.Replacer tries its pairs in order at each position, so a
	// value that contains another is replaced whole.
	slices.SortFunc(forms, func(a, b string) int { return cmp.Or(cmp.Compare(len(b), len(a)), strings.Compare(a, b)) })
	forms = slices.Compact(forms)
	pairs := make([]string, 0, 2*len(forms))
	for _, f := range forms {
		pairs = append(pairs, f, Redacted)
	}
	return &Redactor{r: strings.NewReplacer(pairs...)}
}

// String returns s with every hidden value replaced by Redacted.
func (r *Redactor) String(s string) string {
	if r == nil {
		return s
	}
	return r.r.Replace(s)
}

// Error returns err with a redacted message; errors.Is and errors.As still see err.
func (r *Redactor) Error(err error) error {
	if r == nil || err == nil {
		return err
	}
	msg := r.String(err.Error())
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }
