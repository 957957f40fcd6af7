package sopsfixture

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"time"

	"github.com/converge-dev/converge/sources/sops/decrypter"
)

// Objects named with these markers make this test binary's decryption program misbehave,
// when the object is the first of the request: HangMarker never answers (until the parent
// kills it), FloodMarker writes an endless answer. The seams live in test binaries only, so
// no shipped program can be made to hang or flood by an object.
const (
	HangMarker  = "converge-test-decrypt-hang"
	FloodMarker = "converge-test-decrypt-flood"
)

// ServeDecryption makes this test binary the SOPS decryption program, as converge-decrypt
// is in a shipped install: started as one (see decrypter.ServeChild) it serves the request
// and exits; otherwise it points CONVERGE_DECRYPT_PROGRAM (sops.ProgramEnv) at itself, so
// decryption in this process starts it. Call it first in TestMain: no program is built.
func ServeDecryption() {
	if os.Getenv("CONVERGE_DECRYPT_CHILD") == "1" { // the marker decrypter.ServeChild checks
		out := os.Stdout
		os.Stdout = os.Stderr
		in := bufio.NewReaderSize(os.Stdin, 64<<10)
		head, _ := in.Peek(64 << 10)
		switch {
		case bytes.Contains(head, []byte(HangMarker)):
			time.Sleep(time.Hour) // killed by the parent long before
			os.Exit(3)
		case bytes.Contains(head, []byte(FloodMarker)):
			// One endless string: valid JSON as far as it goes.
			_, _ = out.Write([]byte(`{"results":[{"message":"`))
			chunk := bytes.Repeat([]byte("x"), 64<<10)
			for {
				if _, err := out.Write(chunk); err != nil {
					os.Exit(3)
				}
			}
		}
		os.Exit(decrypter.Serve(in, out))
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sopsfixture:", err)
		os.Exit(2)
	}
	if err := os.Setenv("CONVERGE_DECRYPT_PROGRAM", exe); err != nil {
		fmt.Fprintln(os.Stderr, "sopsfixture:", err)
		os.Exit(2)
	}
}
