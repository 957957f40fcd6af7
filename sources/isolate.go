package sources

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/converge-dev/converge/sources/internal/childproc"
)

// An isolated build runs kustomize in a child process: the binary itself, re-executed with
// childEnv set, which ServeChild turns into a render child before main does anything else.
//
// Why a process: kustomize fetches any http(s) URL it is asked to load, in any field, with
// its own &http.Client{}; it clones git with the git program; and it cannot be interrupted.
// In the child, http.DefaultTransport refuses every request and no program can be started
// (PATH is empty, GIT_ALLOW_PROTOCOL allows nothing), whatever field names the URL; the
// parent kills the child when the context ends, so a stuck build really stops; and each
// child has its own kyaml state, so builds of different Syncs need no common lock.
const childEnv = "CONVERGE_RENDER_CHILD"

// hookInstalled records that this binary calls ServeChild, so it can serve as a child.
var hookInstalled atomic.Bool

// DefaultRenderSlots is how many render children run at once by default (Limits.RenderSlots).
const DefaultRenderSlots = 2

// childrenRunning counts the render children started and not yet waited for, with the most
// at once (for tests).
var childrenRunning heldGauge

// ServeChild turns this process into a render child when an isolated render started it,
// and exits when the build is done; in any other process it returns at once, recording
// that the binary can serve children. A binary that renders with RenderOptions.Isolate
// calls it first thing in main (test binaries in TestMain): an isolated render in a binary
// that does not is refused, rather than re-running a binary that would not understand.
func ServeChild() {
	if os.Getenv(childEnv) != "1" {
		hookInstalled.Store(true)
		return
	}
	// Whatever a library prints must not corrupt the answer.
	out := os.Stdout
	os.Stdout = os.Stderr
	os.Exit(serveChild(os.Stdin, out))
}

// childRequest is what the parent sends to a render child on its stdin.
type childRequest struct {
	Root             string `json:"root"`
	Unit             string `json:"unit"`
	Kustomization    string `json:"kustomization"`
	AllowRemoteBases bool   `json:"allowRemoteBases"`
	Limits           Limits `json:"limits"`
	// Ignored is RenderOptions.Ignored.
	Ignored []string `json:"ignored,omitempty"`
	// Rendered is the rendered path and Read the bytes its render read so far: the child
	// goes on counting in the same budget, and its errors name the same path.
	Rendered string `json:"rendered"`
	Read     int64  `json:"read"`
	// Helm, when set, renders the chart folder Unit instead of a kustomization.
	Helm *HelmOptions `json:"helm,omitempty"`
	// Overlay is RenderOptions.Overlay, as checked; Generate says the kustomization of Unit
	// is generated (unit.generate).
	Overlay  *Overlay `json:"overlay,omitempty"`
	Generate bool     `json:"generate,omitempty"`
}

// childResponse ends a render child's answer on its stdout, after its resources (see
// childRecord).
type childResponse struct {
	// Ordered holds, by index in Resources, the resources with SOPS metadata as YAML in
	// their written field order (see buildInput.run).
	Ordered map[int]string `json:"ordered,omitempty"`
	Errors  []childError   `json:"errors,omitempty"`
	// Read is the bytes the child read (its copy of the source), for the parent's budget.
	Read int64 `json:"read"`
}

// childError carries one error across the process boundary, keeping what IsTerminal and
// errors.Is need.
type childError struct {
	Input   bool   `json:"input,omitempty"`
	File    string `json:"file,omitempty"`
	Line    int    `json:"line,omitempty"`
	Doc     int    `json:"doc,omitempty"`
	Docs    int    `json:"docs,omitempty"`
	Object  string `json:"object,omitempty"`
	Message string `json:"message"`
	Is      string `json:"is,omitempty"`
}

// sentinels are the errors whose identity crosses the boundary.
var sentinels = map[string]error{
	"remote": ErrRemoteBase, "files": ErrTooManyFiles, "size": ErrFileTooLarge, "objects": ErrTooManyObjects,
	"total": ErrSourceTooLarge, "escape": ErrPathEscape,
}

func serveChild(in io.Reader, out io.Writer) int {
	var req childRequest
	if err := json.NewDecoder(in).Decode(&req); err != nil {
		fmt.Fprintln(os.Stderr, "render child: read request:", err)
		return 2
	}
	// Before anything of the source is read: whatever it holds, the build runs under the
	// limit.
	if err := childproc.LimitMemory(req.Limits.withDefaults().MaxRenderMemory); err != nil {
		fmt.Fprintln(os.Stderr, "render child:", err)
		return 2
	}
	if !req.AllowRemoteBases {
		http.DefaultTransport = refusingTransport{}
	}
	opts := RenderOptions{AllowRemoteBases: req.AllowRemoteBases, Limits: req.Limits, Ignored: req.Ignored, Overlay: req.Overlay}
	b := newBudget(req.Rendered, req.Limits)
	b.bytes.Store(req.Read)
	var resources [][]byte
	var origins []string
	var ordered map[int]string
	var err error
	if req.Helm != nil {
		resources, origins, err = helmTemplate(req.Root, req.Unit, *req.Helm, newIgnoredSet(req.Ignored), b)
	} else {
		resources, ordered, err = kustomize(context.Background(), req.Root, unit{rel: req.Unit, kustomization: req.Kustomization, generate: req.Generate}, opts, b)
	}
	resp := childResponse{Errors: encodeErrors(err), Read: b.bytes.Load() - req.Read, Ordered: ordered}
	if err != nil {
		resources = nil
	}
	if err := writeAnswer(out, resources, origins, resp); err != nil {
		fmt.Fprintln(os.Stderr, "render child: write answer:", err)
		return 2
	}
	return 0
}

// buildIsolated runs kustomize on u in a render child and decodes its answer. The child
// counts its copy of the source in the render's budget b (from what b held when it
// started: children running in parallel each see the others' reads only when they end),
// and the answer is read only up to what b has left.
func buildIsolated(ctx context.Context, root string, u unit, opts RenderOptions, b *budget) ([]decoded, error) {
	req := childRequest{Root: root, Unit: u.rel, Kustomization: u.kustomization,
		AllowRemoteBases: opts.AllowRemoteBases, Limits: b.limits, Ignored: opts.Ignored, Rendered: b.rel, Read: b.bytes.Load(),
		Overlay: opts.Overlay, Generate: u.generate}
	return runChild(ctx, path.Join(u.rel, u.kustomization), "kustomize build", req, opts, b)
}

// runChild runs one render child for req, naming file and what it does (what) in its
// errors, and decodes its answer into objects counted in b.
func runChild(ctx context.Context, file, what string, req childRequest, opts RenderOptions, b *budget) ([]decoded, error) {
	if !hookInstalled.Load() {
		return nil, fmt.Errorf("%s: isolated %s: this binary does not call sources.ServeChild first in main", file, what)
	}
	release, err := renderSlots(b.limits.RenderSlots).acquire(ctx, tenantOf(ctx))
	if err != nil {
		return nil, fmt.Errorf("%s: %s did not start: %w", file, what, err)
	}
	defer release()
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("%s: isolated %s: %w", file, what, err)
	}
	js, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = childEnviron(opts.AllowRemoteBases && req.Helm == nil, b.limits)
	pipe, stderr, err := childproc.Start(cmd, js)
	if err != nil {
		return nil, fmt.Errorf("%s: isolated %s: %w", file, what, err)
	}
	childrenRunning.add(1)
	defer childrenRunning.add(-1)
	stdout := &childproc.Reader{R: pipe, Max: b.remaining(), Err: errAnswerOverBudget}
	objs, resp, readErr := readAnswer(stdout, file, b)
	killed := readErr != nil || resp == nil
	if killed {
		_ = cmd.Process.Kill() // an answer cut off: the rest is not needed
	}
	err = cmd.Wait()
	return answerResult(ctx, file, what, answer{objs, resp, readErr, err, killed}, stdout, stderr, b)
}

// answer is what the parent saw of a render child: its objects and end record as read,
// the errors of the read and of the process, and whether the parent killed it.
type answer struct {
	objs    []decoded
	resp    *childResponse
	readErr error
	waitErr error
	killed  bool
}

// answerResult sorts out how an isolated build ended: stopped, out of memory or of its
// byte budget, failed, or its objects.
func answerResult(ctx context.Context, file, what string, a answer, stdout *childproc.Reader, stderr *childproc.TailBuffer, b *budget) ([]decoded, error) {
	objs, resp, readErr, waitErr := a.objs, a.resp, a.readErr, a.waitErr
	switch {
	case ctx.Err() != nil:
		return nil, fmt.Errorf("%s: %s stopped: %w", file, what, context.Cause(ctx))
	case stdout.Over:
		return nil, b.read(b.remaining() + 1) // fails, naming the limit
	case waitErr != nil && childproc.OutOfMemory(waitErr, stderr.Head(), a.killed):
		return nil, &InputError{File: file, Err: fmt.Errorf("%w of %d MiB (raise it with --render-memory-limit)",
			ErrRenderMemory, b.limits.MaxRenderMemory>>20)}
	case IsTerminal(readErr):
		return nil, readErr
	case waitErr != nil:
		return nil, fmt.Errorf("%s: %s process: %w: %s", file, what, waitErr, strings.TrimSpace(stderr.String()))
	case readErr != nil && resp == nil:
		return nil, fmt.Errorf("%s: %s process: answer: %w", file, what, readErr)
	case resp == nil:
		return nil, fmt.Errorf("%s: %s process: answer ended early", file, what)
	case len(resp.Errors) > 0:
		return nil, decodeErrors(resp.Errors)
	}
	if err := b.read(resp.Read + stdout.N); err != nil {
		return nil, err
	}
	return objs, readErr
}

// childEnvKept are the variables of the parent's environment a render child keeps: the
// daemon's others (its kubeconfig, tokens, GOMEMLIMIT, proxies) are none of a build's
// business. With remote bases, git and HTTP fetches also keep what they need to run.
var (
	childEnvKept       = []string{"HOME", "TMPDIR", "GOCOVERDIR"}
	childEnvKeptRemote = []string{"PATH", "GIT_ALLOW_PROTOCOL", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
		"http_proxy", "https_proxy", "no_proxy", "SSL_CERT_FILE", "SSL_CERT_DIR"}
)

// childEnviron is a render child's environment: the few variables it keeps, the child
// marker, a soft memory limit of its own (three quarters of its hard one, MaxRenderMemory,
// which the child sets on itself: see childproc.LimitMemory), and, without remote bases, no way to
// start a program or to let git use any protocol.
func childEnviron(allowRemote bool, limits Limits) []string {
	kept := childEnvKept
	if allowRemote {
		kept = append(kept[:len(kept):len(kept)], childEnvKeptRemote...)
	}
	var env []string
	for _, name := range kept {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	env = append(env, childEnv+"=1", "GOMEMLIMIT="+strconv.FormatInt(limits.withDefaults().MaxRenderMemory*3/4, 10))
	if !allowRemote {
		env = append(env, "PATH=", "GIT_ALLOW_PROTOCOL=converge-refuses-all")
	}
	return env
}

// encodeErrors flattens err (joined or not) for the answer.
func encodeErrors(err error) []childError {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []childError
		for _, e := range j.Unwrap() {
			out = append(out, encodeErrors(e)...)
		}
		return out
	}
	ce := childError{Message: err.Error()}
	var input *InputError
	if errors.As(err, &input) {
		ce = childError{Input: true, File: input.File, Line: input.Line, Doc: input.Doc, Docs: input.Docs,
			Object: input.Object, Message: input.Err.Error()}
	}
	for name, s := range sentinels {
		if errors.Is(err, s) {
			ce.Is = name
		}
	}
	return []childError{ce}
}

func decodeErrors(ces []childError) error {
	errs := make([]error, len(ces))
	for i, ce := range ces {
		var err error = &wireError{msg: ce.Message, is: sentinels[ce.Is]}
		if ce.Input {
			err = &InputError{File: ce.File, Line: ce.Line, Doc: ce.Doc, Docs: ce.Docs, Object: ce.Object, Err: err}
		}
		errs[i] = err
	}
	return joinErrors(errs)
}

// wireError is an error decoded from a render child: its message, and the sentinel it
// matched there.
type wireError struct {
	msg string
	is  error
}

func (e *wireError) Error() string { return e.msg }
func (e *wireError) Unwrap() error { return e.is }

// refusingTransport is a render child's http.DefaultTransport: it refuses every request and
// records its URL, so the error can name where the URL is written.
type refusingTransport struct{}

var refused struct {
	sync.Mutex
	urls []string
}

func (refusingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	refused.Lock()
	refused.urls = append(refused.urls, req.URL.String())
	refused.Unlock()
	return nil, fmt.Errorf("%w: refusing to fetch %s", ErrRemoteBase, req.URL)
}

// refusedURLs returns the URLs refused so far (none outside a render child).
func refusedURLs() []string {
	refused.Lock()
	defer refused.Unlock()
	return refused.urls
}
