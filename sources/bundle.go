package sources

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/converge-dev/converge/sources/git"
	"github.com/converge-dev/converge/sources/helmrepo"
	"github.com/converge-dev/converge/sources/oci"
	"github.com/converge-dev/converge/sources/signature"
)

// Bundle is what a source renders to at one revision.
type Bundle struct {
	// Revision names the source content: "main@sha1:<hex>" for git, "sha256:<hex>" of the
	// files for a local folder.
	Revision string
	// Key names what was rendered: a hash (64 hex digits) of the source content, the path
	// and the render options. Two Bundles of one Key hold equal Objects (one render loaded
	// twice); "" for a Bundle not made by a Loader.
	Key string
	// Objects are the validated objects, in a deterministic order. Each Load decodes its
	// own, and the Bundles made from it (a substitution, a decryption) share the parts they
	// do not change: read-only.
	Objects []*unstructured.Unstructured
	// Own marks the Objects this Bundle alone holds (same length as Objects; nil: none is
	// known to be): nothing else refers to them or to the maps of their metadata, so the
	// Bundle's holder may hand them on to be changed (engine.Set.Own). Every object a Load
	// returns is its own; a step's result (a substitution, a decryption) marks only the
	// objects it took from its input as they were (pipeline.Prepare).
	Own []bool
	// Docs, for a Load asked for them (LoadOptions.Encoded), hold each object's JSON in
	// the place of Objects and Own, which are nil: the caller decodes each object when it
	// needs it (Decoded decodes them all), so that a render is never held whole in maps of
	// map[string]any, five times its JSON. Read-only.
	Docs [][]byte
	// Unloaded says Load was told the caller needs no object of this render
	// (LoadOptions.Unneeded): Objects and Own are nil, the rest is as for a whole Bundle.
	Unloaded bool
	// Origins says where each object of Objects was rendered from, for messages: the file,
	// its line and document ("apps/web.yaml:14 (document 2 of 3)"), or the kustomization
	// that built it. Same length and order as Objects; read-only.
	Origins []string
	// Ordered holds, for an object with SOPS metadata, its document as written (YAML, in
	// its field order, after kustomize), since the SOPS MAC depends on field order and
	// Objects are maps; nil for other objects, and nil as a whole when there are none.
	// Same order as Objects when not nil; read-only.
	Ordered [][]byte
	// CommitTime is the committer time of a git revision; zero for a local folder.
	CommitTime time.Time
	// Signatures are the verified signatures of a git revision fetched with
	// git.Repository.Verify, or of an OCI artifact fetched with oci.Artifact.Verify (its
	// Object "artifact sha256:<hex>"); nil otherwise.
	Signatures []signature.Signature
}

// Decoded is b with its objects decoded when b holds them as JSON (Docs): a new Bundle
// whose Objects are its own (Own); b itself otherwise.
func (b *Bundle) Decoded() (*Bundle, error) {
	if b == nil || b.Docs == nil {
		return b, nil
	}
	out := *b
	out.Docs = nil
	out.Objects = make([]*unstructured.Unstructured, len(b.Docs))
	for i, doc := range b.Docs {
		o, err := decodeDoc(doc)
		if err != nil {
			return nil, err
		}
		out.Objects[i] = o
	}
	out.Own = slices.Repeat([]bool{true}, len(out.Objects))
	return &out, nil
}

var (
	// ErrEmptyRender reports that a path rendered to no object. It is returned together
	// with a Bundle (carrying the revision) by Load, so a caller that allows empty sources
	// can go on; one that does not must not prune on it.
	ErrEmptyRender = errors.New("rendered no objects")
	// ErrPathEscape reports a path, or a symlink inside it, that leads out of the source.
	ErrPathEscape = errors.New("path leads outside the source")
	// ErrPathNotFound reports a path that does not exist in the source.
	ErrPathNotFound = errors.New("path does not exist in the source")
	// ErrRemoteBase reports a kustomization that refers to a remote base or resource while
	// RenderOptions.AllowRemoteBases is false.
	ErrRemoteBase = errors.New("remote bases are disabled")
)

// InputError is a terminal failure caused by the content of the source: the same revision
// will always fail the same way, so callers should wait for a new revision rather than
// retry. Its message names the file, the document and the object when known, e.g.
// "apps/web.yaml:14: document 2 of 3: ConfigMap default/web: missing apiVersion".
type InputError struct {
	// File is the slash-separated path relative to the source root.
	File string
	// Line is the 1-based line in File, 0 when unknown.
	Line int
	// Doc is the 1-based index of the YAML document in File, 0 when not applicable.
	Doc int
	// Docs is the number of documents in File.
	Docs int
	// Object is "Kind namespace/name" (or "Kind name" without namespace) when known.
	Object string
	// Err is the cause.
	Err error
}

// Error formats the location, then the cause.
func (e *InputError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Doc > 0 {
		fmt.Fprintf(&b, ": document %d of %d", e.Doc, e.Docs)
	}
	if e.Object != "" {
		b.WriteString(": " + e.Object)
	}
	b.WriteString(": " + e.Err.Error())
	return b.String()
}

// Unwrap returns the cause.
func (e *InputError) Unwrap() error { return e.Err }

// IsTerminal reports whether err is caused by the source content (bad input, an empty
// render) rather than by the environment (network, disk, cancellation). A joined error is
// terminal only when all its parts are. Fetch failures, including authentication and a
// missing ref, are not terminal: the remote can change without a new revision.
func IsTerminal(err error) bool {
	if err == nil {
		return false
	}
	if _, ok := err.(*InputError); ok {
		return true
	}
	if errors.Is(err, ErrEmptyRender) || git.IsTerminal(err) || oci.IsTerminal(err) || helmrepo.IsTerminal(err) {
		return true
	}
	switch x := err.(type) {
	case interface{ Unwrap() []error }:
		errs := x.Unwrap()
		for _, e := range errs {
			if !IsTerminal(e) {
				return false
			}
		}
		return len(errs) > 0
	case interface{ Unwrap() error }:
		return IsTerminal(x.Unwrap())
	}
	return false
}

// maxErrors bounds how many per-file errors are joined, so that a status condition stays
// readable when a whole folder is broken.
const maxErrors = 10

// joinErrors joins errs, keeping the first maxErrors and counting the rest.
func joinErrors(errs []error) error {
	if len(errs) > maxErrors {
		dropped := errs[maxErrors:]
		var more error = fmt.Errorf("... and %d more errors", len(dropped))
		if IsTerminal(errors.Join(dropped...)) {
			more = &InputError{File: "...", Err: fmt.Errorf("%d more errors", len(dropped))}
		}
		errs = append(errs[:maxErrors:maxErrors], more)
	}
	return errors.Join(errs...)
}
