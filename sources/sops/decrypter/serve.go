// Package decrypter is the SOPS decryption program's side: it decrypts the encrypted
// objects of a request read on stdin with the age identities it carries, and writes the
// decrypted objects (or each object's error) on stdout. It is the only package of
// Converge that links sops (and through sops' root package every cloud KMS client and
// gRPC): converge-decrypt calls Main, and the converge binary starts that program only
// when a render holds an encrypted object (package sops), so the daemon and its render
// children carry none of it.
//
// It decrypts as Flux's kustomize-controller does per resource: an object with a
// top-level "sops" field carrying a MAC (any kind), and a Secret data entry that is itself
// a SOPS-encrypted file. Only age keys are supported, and only the identities of the
// request are used: never the process environment or home folder. The MAC is always
// verified. Errors name no value.
package decrypter

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"

	sopsage "github.com/getsops/sops/v3/age"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/converge-dev/converge/sources/internal/childproc"
	"github.com/converge-dev/converge/sources/sops/internal/wire"
)

// Main serves one request of converge (see ServeChild) and exits. Run by hand, outside
// converge, it says what it is and exits with status 2.
func Main() {
	ServeChild()
	fmt.Fprintln(os.Stderr, "converge-decrypt decrypts SOPS-encrypted objects for converge, which starts it; it is not run by hand")
	os.Exit(2)
}

// ServeChild turns this process into the decryption program when converge started it as
// one (its environment says so) and exits when the request is answered; in any other
// process it returns at once. A test binary that decrypts calls it first in TestMain, and
// points converge at itself (CONVERGE_DECRYPT_PROGRAM).
func ServeChild() {
	if os.Getenv(wire.ChildEnv) != "1" {
		return
	}
	// Whatever a library prints must not corrupt the answer.
	out := os.Stdout
	os.Stdout = os.Stderr
	os.Exit(Serve(os.Stdin, out))
}

// Serve puts this process under its memory budget (wire.MemoryEnv), reads one request
// from in, decrypts it and writes the answer to out. It returns the exit status: 0 when an
// answer was written, whatever the objects' errors.
func Serve(in io.Reader, out io.Writer) int {
	if budget, err := strconv.ParseInt(os.Getenv(wire.MemoryEnv), 10, 64); err == nil && budget > 0 {
		// Before the request is read: whatever it holds, it is decrypted under the limit.
		if err := childproc.LimitMemory(budget); err != nil {
			fmt.Fprintln(os.Stderr, "converge-decrypt:", err)
			return 2
		}
	}
	var req wire.Request
	if err := json.NewDecoder(in).Decode(&req); err != nil {
		fmt.Fprintln(os.Stderr, "converge-decrypt: read request:", err)
		return 2
	}
	answer := Decrypt(req)
	if err := json.NewEncoder(out).Encode(answer); err != nil {
		fmt.Fprintln(os.Stderr, "converge-decrypt: write answer:", err)
		return 2
	}
	return 0
}

// Decrypt decrypts each object of req with its identities. An identity that does not
// parse fails every object (the daemon parses them before it sends them, so it does not
// happen).
func Decrypt(req wire.Request) wire.Answer {
	var ids sopsage.ParsedIdentities
	idsErr := ids.Import(req.Identities...)
	results := make([]wire.Result, len(req.Objects))
	for i, obj := range req.Objects {
		results[i] = decryptOne(obj, ids, idsErr)
	}
	return wire.Answer{Results: results}
}

func decryptOne(obj wire.Object, ids sopsage.ParsedIdentities, idsErr error) wire.Result {
	fail := func(entry string, err error) wire.Result {
		return wire.Result{Entry: entry, Kind: wire.KindOf(err), Message: err.Error()}
	}
	if idsErr != nil {
		return fail("", fmt.Errorf("%w: the age identities do not parse", errKey))
	}
	o := &unstructured.Unstructured{}
	if err := o.UnmarshalJSON(obj.Object); err != nil {
		return fail("", fmt.Errorf("%w: the object does not decode", errIntegrity))
	}
	var doc []byte
	if obj.Doc != "" {
		doc = []byte(obj.Doc)
	}
	plain, entry, err := decryptObject(o, doc, ids)
	if err != nil {
		return fail(entry, err)
	}
	js, err := plain.MarshalJSON()
	if err != nil {
		return fail("", fmt.Errorf("%w: decrypted object does not encode: %w", errIntegrity, errWithheld))
	}
	return wire.Result{Object: js}
}
