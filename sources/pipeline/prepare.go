package pipeline

import (
	"bytes"
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/sources/sops"
	"github.com/converge-dev/converge/sources/varsubst"
)

// Options say how a Bundle is prepared.
type Options struct {
	// Decryption says where the keys come from and how failures are explained.
	Decryption Decryption
	// Substitution says where the variables come from; nil: nothing is substituted.
	Substitution *Substitution
	// Redact are further values the Redactor hides (such as Helm values read from
	// Secrets), so one Redactor covers everything the caller writes.
	Redact []string
	// Metadata, when set, labels and annotates every object last; nil: nothing.
	Metadata *Metadata
}

// Result is a prepared Bundle and what a caller needs to write about it.
type Result struct {
	// Bundle is the rendered Bundle decrypted, then substituted, then given Metadata; nil
	// with an error.
	Bundle *sources.Bundle
	// Rendered is the Bundle as given, and Decrypted the one after decryption (Rendered
	// itself when nothing was encrypted or the encrypted objects were kept as they are;
	// nil when decryption failed): together they say which values were encrypted
	// (sops.MaskValues, sops.Encrypted), for a caller that masks or withholds them.
	Rendered, Decrypted *sources.Bundle
	// Redactor hides the values decrypted and the values of every Sensitive variable source
	// (each as read and as substituted), and Options.Redact. It is set with an error too,
	// for the values read before the failure; it is nil when there is nothing to hide.
	Redactor *varsubst.Redactor
}

// Prepare prepares rendered. As Flux: decrypted first, then substituted (a variable may not
// reach a ciphertext), then given the common metadata. rendered is not modified. A failure of decryption is a
// *DecryptError; one of substitution names the variable source, the object or the
// variable. On error Result.Bundle is nil: nothing may be applied or pruned. Result.Bundle
// owns (Bundle.Own) only the objects rendered owns that no step changed.
//
// A Bundle of JSON documents (Bundle.Docs) is decoded only when a step has work: an object
// may be encrypted, a substitution or common metadata is asked for. Otherwise it is
// returned as it is.
func Prepare(ctx context.Context, rendered *sources.Bundle, opts Options) (Result, error) {
	if rendered.Docs != nil {
		if !opts.changes(rendered) {
			opts.Decryption.Memo.drop() // nothing is encrypted: the plaintexts of an earlier render go
			return Result{Bundle: rendered, Rendered: rendered, Decrypted: rendered, Redactor: varsubst.NewRedactor(opts.Redact)}, nil
		}
		decoded, err := rendered.Decoded()
		if err != nil {
			return Result{Redactor: varsubst.NewRedactor(opts.Redact)}, err
		}
		rendered = decoded
	}
	res := Result{Rendered: rendered}
	decrypted, err := opts.Decryption.run(ctx, rendered)
	if err != nil {
		res.Redactor = varsubst.NewRedactor(opts.Redact)
		return res, err
	}
	res.Decrypted = decrypted
	hide := append(sops.Plaintexts(decrypted, rendered), opts.Redact...)
	if opts.Substitution == nil {
		res.Bundle, res.Redactor = owned(rendered, opts.Metadata.apply(decrypted)), varsubst.NewRedactor(hide)
		return res, nil
	}
	out, sensitive, err := opts.Substitution.run(ctx, decrypted)
	if err == nil && decrypted != rendered {
		// A decrypted value that holds a variable is applied, and may be quoted, as substituted.
		hide = append(hide, sops.Plaintexts(out, rendered)...)
	}
	res.Redactor = varsubst.NewRedactor(append(sensitive, hide...))
	if err != nil {
		return res, err
	}
	res.Bundle = owned(rendered, opts.Metadata.apply(out))
	return res, nil
}

// owned returns out with Own marking the objects it took from rendered as they were, of
// those rendered owns: an object a step made may be kept by its Memo for later runs, or
// share maps with the object it replaced.
func owned(rendered, out *sources.Bundle) *sources.Bundle {
	if out == rendered {
		return out
	}
	out.Own = nil
	if len(rendered.Own) != len(rendered.Objects) || len(out.Objects) != len(rendered.Objects) {
		return out
	}
	own := make([]bool, len(out.Objects))
	for i, o := range out.Objects {
		own[i] = rendered.Own[i] && o == rendered.Objects[i]
	}
	out.Own = own
	return out
}

// changes says a step of opts may change an object of b, whose objects are JSON documents:
// a substitution or common metadata is asked for, or a document is one decryption applies
// to (sops.Encrypted: a "sops" key, or a Secret whose entries are encrypted files or an
// encrypted .env file's variables). Only the documents that may be such are decoded to be
// sure, one at a time: those naming a "sops key or the kind Secret, as the render cache's
// encoder writes them (compact, unescaped).
func (opts Options) changes(b *sources.Bundle) bool {
	if opts.Substitution != nil || opts.Metadata != nil && (len(opts.Metadata.Labels) > 0 || len(opts.Metadata.Annotations) > 0) {
		return true
	}
	for _, doc := range b.Docs {
		if !bytes.Contains(doc, []byte(`"sops`)) && !bytes.Contains(doc, []byte(`"Secret"`)) {
			continue
		}
		var obj map[string]any
		if err := utiljson.Unmarshal(doc, &obj); err != nil || sops.Encrypted(&unstructured.Unstructured{Object: obj}) {
			return true // one that does not decode is left to Decoded to report
		}
	}
	return false
}
