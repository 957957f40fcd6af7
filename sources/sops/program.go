package sops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/sources/internal/childproc"
	"github.com/converge-dev/converge/sources/sops/internal/wire"
)

// ProgramEnv names the variable that, set to an absolute path, says where the decryption
// program is; unset, it is ProgramName in the folder of the running binary.
const ProgramEnv = "CONVERGE_DECRYPT_PROGRAM"

// ProgramName is the decryption program's file name (cmd/converge-decrypt).
const ProgramName = "converge-decrypt"

// ErrNoProgram reports that the decryption program is not where converge looks for it.
var ErrNoProgram = errors.New("SOPS decryption needs converge-decrypt next to converge: make build builds both, the image ships both")

// answerMargin is what the decryption program's answer may hold beyond the size of its
// request: a decrypted object is smaller than the encrypted one it replaces (a value is
// shorter than its ciphertext, and the sops metadata goes), so only a broken or subverted
// program writes more.
const answerMargin = 1 << 20

// program returns the decryption program's path.
func program() (string, error) {
	p := os.Getenv(ProgramEnv)
	if p != "" && !filepath.IsAbs(p) {
		return "", fmt.Errorf("%w (%s=%q is not an absolute path)", ErrNoProgram, ProgramEnv, p)
	}
	if p == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("%w (the running binary's folder: %w)", ErrNoProgram, err)
		}
		p = filepath.Join(filepath.Dir(exe), ProgramName)
	}
	if fi, err := os.Stat(p); err != nil || fi.IsDir() {
		return "", fmt.Errorf("%w (%s not found)", ErrNoProgram, p)
	}
	return p, nil
}

// runProgram has the decryption program decrypt the objects of b at idx with keys, and
// returns its results, one per object.
func runProgram(ctx context.Context, b *sources.Bundle, idx []int, keys *Keys, opts Options) ([]wire.Result, error) {
	path, err := program()
	if err != nil {
		return nil, err
	}
	in, err := request(b, idx, keys)
	if err != nil {
		return nil, err
	}
	memory := opts.MaxMemory
	if memory <= 0 {
		memory = DefaultMaxMemory
	}
	if opts.Slot != nil {
		release, err := opts.Slot(ctx)
		if err != nil {
			return nil, fmt.Errorf("decryption did not start: %w", err)
		}
		defer release()
	}
	// The keys go on stdin only: never in the arguments or the environment, which other
	// processes of the machine may read.
	cmd := exec.CommandContext(ctx, path)
	cmd.Env = childEnviron(memory)
	pipe, stderr, err := childproc.Start(cmd, in)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrProgram, path, err)
	}
	stdout := &childproc.Reader{R: pipe, Max: int64(len(in)) + answerMargin, Err: errAnswerTooLarge}
	var answer wire.Answer
	readErr := json.NewDecoder(stdout).Decode(&answer)
	if readErr == nil {
		// What follows the answer is read too, within the bound: a program that goes on
		// writing would otherwise block on a full pipe until ctx ends.
		_, readErr = io.Copy(io.Discard, stdout)
	}
	killed := readErr != nil
	if killed {
		_ = cmd.Process.Kill() // an answer cut off or broken: the rest is not needed
	}
	waitErr := cmd.Wait()
	switch {
	case ctx.Err() != nil:
		return nil, fmt.Errorf("decryption stopped: %w", context.Cause(ctx))
	case stdout.Over:
		return nil, fmt.Errorf("%w: the decryption program's answer exceeded %d bytes (the request's %d and 1 MiB)",
			ErrLimit, stdout.Max, len(in))
	case waitErr != nil && childproc.OutOfMemory(waitErr, stderr.Head(), killed):
		return nil, fmt.Errorf("%w: decryption needed more than its memory limit of %d MiB%s", ErrLimit, memory>>20, setting(opts.MemorySetting))
	case waitErr != nil:
		return nil, fmt.Errorf("%w: %s: %w: %s", ErrProgram, path, waitErr, strings.TrimSpace(stderr.String()))
	case readErr != nil:
		return nil, fmt.Errorf("%w: %s: answer: %w", ErrProgram, path, readErr)
	case len(answer.Results) != len(idx):
		return nil, fmt.Errorf("%w: %s answered for %d objects, not %d", ErrProgram, path, len(answer.Results), len(idx))
	}
	return answer.Results, nil
}

// request encodes the program's request: the objects of b at idx, with their documents as
// written, and the identities of keys.
func request(b *sources.Bundle, idx []int, keys *Keys) ([]byte, error) {
	req := wire.Request{Identities: keys.age, Objects: make([]wire.Object, len(idx))}
	for n, i := range idx {
		js, err := b.Objects[i].MarshalJSON()
		if err != nil {
			return nil, err
		}
		req.Objects[n].Object = js
		if i < len(b.Ordered) {
			req.Objects[n].Doc = string(b.Ordered[i])
		}
	}
	return json.Marshal(req)
}

func setting(name string) string {
	if name == "" {
		return ""
	}
	return " (raise it with " + name + ")"
}

// childEnviron is the decryption program's environment: its marker and memory budget, a
// soft limit of three quarters of it for the Go runtime, and nothing of the daemon's
// (kubeconfig, tokens, SOPS_AGE_KEY_FILE and the like). GOCOVERDIR is kept for coverage
// builds.
func childEnviron(memory int64) []string {
	env := []string{wire.ChildEnv + "=1", wire.MemoryEnv + "=" + strconv.FormatInt(memory, 10),
		"GOMEMLIMIT=" + strconv.FormatInt(memory*3/4, 10)}
	if v, ok := os.LookupEnv("GOCOVERDIR"); ok {
		env = append(env, "GOCOVERDIR="+v)
	}
	return env
}

// errAnswerTooLarge ends the read of an answer past its bound.
var errAnswerTooLarge = errors.New("answer too large")
