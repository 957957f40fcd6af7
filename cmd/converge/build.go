package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/sources/git"
	"github.com/converge-dev/converge/sources/pipeline"
	"github.com/converge-dev/converge/sources/varsubst"
)

// sourceFlags say what to render: a local PATH, a git repository or an OCI artifact. "converge build" and
// "converge apply" share them.
type sourceFlags struct {
	root           string
	gitURL         string
	path           string
	ref            refFlags
	sshKeyFile     string
	knownHostsFile string
	cacheDir       string
	timeout        time.Duration
	allowRemote    bool
	limits         sources.Limits
	oci            ociFlags
	decryption     decryptionFlags
	subst          substituteFlags
	helm           helmFlags
	chart          chartFlags
	verify         verifyFlags
	// stdin is read for the PATH "-" (the command's input; os.Stdin when nil).
	stdin io.Reader
	// redact is the redactor of what load read and decrypted (pipeline.Result.Redactor).
	redact *varsubst.Redactor
}

// buildLong is the long help of "converge build".
const buildLong = `Build renders what converge would apply, without a cluster: a folder with a
kustomization is built with kustomize (remote bases refused unless --allow-remote-bases), a
folder with Chart.yaml is rendered as a Helm chart (as "helm template": --values, --set,
--release-name, --namespace; install and upgrade hooks are objects, test, delete and
rollback hooks are dropped; --helm for a chart fetched with --git-url), any other folder is
decoded as plain YAML/JSON, recursively. Objects are validated (apiVersion,
kind, metadata.name, no duplicates) and printed as one YAML stream separated by "---".

A local PATH is read inside --root, which defaults to the enclosing git work tree (so a
kustomization may use bases elsewhere in the repository) or else PATH itself. Inside a git
work tree, what git ignores (build outputs, local files) is never read: a plain folder skips
it, and a kustomization that references it fails.

A chart of a Helm repository is named as helm template names it: CHART --repo URL (an HTTP
repository's index.yaml, or oci://host/path), or oci://host/path/CHART with --version; the
version is exact or a semver constraint, the highest match wins. Credentials come from
CONVERGE_HELM_USERNAME and CONVERGE_HELM_PASSWORD (or --docker-config), a CA from --ca-file.

A PATH of the form oci://host[:port]/repository[:tag|@sha256:digest] is an OCI artifact
in Flux's format ("flux push artifact"), fetched and extracted, and --path is rendered
inside it; --ref-semver picks the highest matching tag instead. Credentials come from
--docker-config, a custom CA from --ca-file; --insecure-registry speaks plain HTTP.

With --git-url the repository is fetched instead (HTTPS, SSH or a local path) and --path is
rendered inside it. Credentials come from the environment: CONVERGE_GIT_USERNAME and
CONVERGE_GIT_PASSWORD, or CONVERGE_GIT_TOKEN, for HTTPS; --ssh-key-file and
--known-hosts-file for SSH.

SOPS-encrypted objects (a top-level "sops" field) are printed with their encrypted values
as **SOPS**, as "flux build kustomization" does. With --decryption-key-file (an age
identity file, repeatable) they are decrypted in memory, which checks the key and the MAC,
and still printed masked unless --show-secrets.`

// buildExample are the examples of "converge build".
const buildExample = `  # Render a local overlay
  converge build ./overlays/prod

  # Render a Helm chart folder with values
  converge build ./charts/web --values prod.yaml --set image.tag=1.2.3 --release-name web -n apps

  # Render a path of a git branch
  converge build --git-url https://github.com/org/apps.git --ref-branch main --path deploy

  # The highest 1.x release tag, over SSH
  converge build --git-url ssh://git@github.com/org/apps.git --ref-semver '>=1.0.0 <2.0.0' \
    --ssh-key-file ~/.ssh/id_ed25519 --path deploy

  # Render the deploy folder of an OCI artifact (flux push artifact)
  converge build oci://ghcr.io/org/apps:v1.2.3 --path deploy

  # Render a chart of a Helm repository, or of an OCI registry (helm push)
  converge build podinfo --repo https://stefanprodan.github.io/podinfo --version '6.x' -f prod.yaml
  converge build oci://ghcr.io/stefanprodan/charts/podinfo --version 6.5.4

  # One --ref: a branch name, a 40-hex commit, or "branch:", "tag:", "semver:", "commit:"
  converge build --git-url https://github.com/org/apps.git --ref tag:v1.2.3 --path deploy`

// loadOnce is the render cache size of a command's Loader: none, since a command loads its
// source once and a kept render would only be written out as JSON for nothing.
const loadOnce = -1

func newBuildCommand() *cobra.Command {
	var f sourceFlags
	f.decryption.build = true
	var validate bool
	cmd := &cobra.Command{
		Use:     "build [PATH|-]",
		Short:   "Render a kustomization, Helm chart or YAML folder, offline, and print it",
		Long:    buildLong,
		Example: buildExample,
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f.decryption.stderr, f.stdin = cmd.ErrOrStderr(), cmd.InOrStdin()
			b, err := f.load(cmd.Context(), args)
			if err != nil {
				return f.redactor().Error(err)
			}
			if validate {
				if err := checkOffline(b); err != nil {
					return f.redactor().Error(err)
				}
			}
			for _, sig := range b.Signatures {
				fmt.Fprintln(cmd.ErrOrStderr(), "verified:", sig)
			}
			if cmd.Flags().Changed("namespace") {
				// As converge apply -n: objects without a namespace get it, where they have one.
				b = withNamespace(b, f.helm.namespace, cmd.ErrOrStderr())
			}
			out, err := marshalStream(f.decryption.mask(b))
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
	f.addFlags(cmd)
	cmd.Flags().StringVarP(&f.helm.namespace, "namespace", "n", "default", "namespace of the objects that have none, as apply -n sets it (printed only when given), and Helm's .Release.Namespace")
	cmd.Flags().BoolVar(&validate, "validate", false, "also run the checks of converge check: built-in kinds decoded strictly, unknown kinds and fields refused")
	return cmd
}

func newCheckCommand() *cobra.Command {
	var f sourceFlags
	f.decryption.build = true
	cmd := &cobra.Command{
		Use:   "check [PATH]",
		Short: "Render and validate what converge would apply, offline, as a CI lint step",
		Long: `Check renders a source as "converge build" does (the same arguments and flags) and runs,
without a cluster, every check "converge apply" would fail on before the API server judges
the objects further: apiVersion, kind and metadata.name present, no duplicates, and each
object of a built-in group and version decoded strictly into its type — an unknown kind
("ConfigMpa": did you mean ConfigMap?), an unknown field, or a value of the wrong type (a
label "version: 1.5" is a number, not a string) is an error naming the file and the object.
Custom resources are checked by the API server only (converge apply --dry-run).

Exit code 0 when every object passes, 2 otherwise.`,
		Example: `  # Lint an overlay in CI
  converge check ./overlays/prod

  # A chart with its values
  converge check ./charts/web -f prod.yaml`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f.decryption.stderr, f.stdin = cmd.ErrOrStderr(), cmd.InOrStdin()
			b, err := f.load(cmd.Context(), args)
			if err == nil {
				err = checkOffline(b)
			}
			if err != nil {
				return f.redactor().Error(err)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%d objects checked at %s: no error\n", len(b.Objects), b.Revision)
			return err
		},
	}
	f.addFlags(cmd)
	cmd.Flags().StringVarP(&f.helm.namespace, "namespace", "n", "default", "Helm .Release.Namespace of a chart")
	return cmd
}

// addFlags registers the source flags on cmd.
func (f *sourceFlags) addFlags(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.root, "root", "", "source root a local PATH must stay inside (default: enclosing git work tree, else PATH)")
	fl.StringVar(&f.gitURL, "git-url", "", "git repository to fetch instead of a local PATH")
	fl.StringVar(&f.path, "path", ".", "folder or file to render inside the repository (with --git-url) or the artifact (oci://)")
	f.ref.bind(cmd, "")
	fl.StringVar(&f.sshKeyFile, "ssh-key-file", "", "SSH private key file")
	fl.StringVar(&f.knownHostsFile, "known-hosts-file", defaultKnownHosts(), "known_hosts file the SSH host key must be in")
	fl.StringVar(&f.cacheDir, "git-cache-dir", defaultCacheDir(), "directory for fetched repositories")
	fl.DurationVar(&f.timeout, "fetch-timeout", 2*time.Minute, "git fetch timeout")
	fl.BoolVar(&f.allowRemote, "allow-remote-bases", false, "let kustomizations load remote bases and resources")
	addLimitFlags(fl, &f.limits)
	f.oci.addFlags(cmd)
	f.decryption.addFlags(cmd)
	f.subst.addFlags(cmd)
	f.helm.addFlags(cmd)
	f.chart.addFlags(cmd)
	f.verify.addFlags(cmd)
}

// load fetches and renders what the flags and argument name, then decrypts and substitutes it.
func (f *sourceFlags) load(ctx context.Context, args []string) (*sources.Bundle, error) {
	if len(args) == 1 && args[0] == "-" {
		dir, err := f.readStdin()
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		args = []string{filepath.Join(dir, stdinFile)}
		f.root = dir
	}
	src, err := f.source(args)
	if err != nil {
		return nil, err
	}
	if src.Helm, err = f.helm.options(src); err != nil {
		return nil, err
	}
	opts := sources.DefaultLoadOptions()
	opts.Fetch.Timeout = f.timeout
	opts.Fetch.AllowLocal = true // the CLI's user owns the disk it reads
	opts.OCI.Timeout, opts.OCI.AllowLocal = f.timeout, true
	opts.Charts.Timeout, opts.Charts.AllowLocal = f.timeout, true
	opts.Render.AllowRemoteBases = f.allowRemote
	// A checkout in CI may be a pull request from anyone: build it as the daemon does,
	// with no network and no program.
	opts.Render.Isolate = true
	opts.Render.Limits = f.limits
	if src.Git.URL == "" && src.OCI.URL == "" && src.Chart.Repository == "" {
		// What git ignores (build outputs, local files) is no part of what a commit would
		// deploy: not read, not in the revision.
		opts.Render.Ignored = gitIgnored(ctx, src.Dir, src.Path)
	}
	b, err := sources.NewLoaderSized(f.cacheDir, loadOnce).Load(ctx, src, opts)
	if err != nil {
		return b, rootHint(err, src)
	}
	dec, err := f.decryption.decryption()
	if err != nil {
		return nil, err
	}
	dec.MaxMemory, dec.Hints.Memory = f.limits.MaxRenderMemory, "--render-memory-limit"
	res, err := pipeline.Prepare(ctx, b, pipeline.Options{Decryption: dec, Substitution: f.subst.substitution(f.limits)})
	f.decryption.prepared(res)
	f.redact = res.Redactor
	return res.Bundle, err
}

// stdinFile names the YAML read from stdin (PATH "-") in messages and origins.
const stdinFile = "stdin.yaml"

// readStdin writes the YAML stream of the command's input into a new temporary folder,
// within --max-total-size, as kubectl apply -f - reads it; the caller removes the folder.
func (f *sourceFlags) readStdin() (string, error) {
	in := f.stdin
	if in == nil {
		in = os.Stdin
	}
	limit := f.limits.MaxTotalSize
	if limit <= 0 {
		limit = sources.DefaultMaxTotalSize
	}
	data, err := io.ReadAll(io.LimitReader(in, limit+1))
	if err != nil {
		return "", fmt.Errorf("read stdin: %w", err)
	}
	if int64(len(data)) > limit {
		return "", fmt.Errorf("stdin: more than %d bytes (raise the limit with --max-total-size)", limit)
	}
	dir, err := os.MkdirTemp("", "converge-stdin-")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, stdinFile), data, 0o600); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// redactor hides, in what a command prints, the values of Secret manifests given with
// --substitute-from-file and the values load decrypted; nil (hiding nothing) without them.
func (f *sourceFlags) redactor() *varsubst.Redactor {
	return f.redact
}

// source turns the flags and argument into what to load.
func (f *sourceFlags) source(args []string) (sources.Source, error) {
	if f.chart.asked(args) {
		return f.chartSource(args)
	}
	if len(args) == 1 && isOCI(args[0]) {
		src, err := f.ociSource(args[0])
		if err == nil {
			src.OCI.Verify, err = f.verify.ociVerification()
		}
		return src, err
	}
	verify, err := f.verify.verification(f.gitURL)
	if err != nil {
		return sources.Source{}, err
	}
	if f.gitURL == "" {
		if len(args) != 1 {
			return sources.Source{}, errors.New("give a PATH to render, or --git-url")
		}
		return localSource(args[0], f.root)
	}
	if len(args) != 0 {
		return sources.Source{}, errors.New("give either a PATH or --git-url, not both")
	}
	ref, err := f.ref.resolve()
	if err != nil {
		return sources.Source{}, err
	}
	auth := git.Auth{
		Username:    os.Getenv("CONVERGE_GIT_USERNAME"),
		Password:    os.Getenv("CONVERGE_GIT_PASSWORD"),
		BearerToken: os.Getenv("CONVERGE_GIT_TOKEN"),
	}
	if f.sshKeyFile != "" {
		if auth.SSHPrivateKey, err = os.ReadFile(f.sshKeyFile); err != nil {
			return sources.Source{}, err
		}
		if auth.SSHKnownHosts, err = os.ReadFile(f.knownHostsFile); err != nil {
			return sources.Source{}, fmt.Errorf("known hosts: %w", err)
		}
	}
	return sources.Source{Git: git.Repository{URL: f.gitURL, Ref: ref, Auth: auth, Verify: verify}, Path: f.path}, nil
}

// localSource finds the source root of a local path: the given root, else the enclosing git
// work tree, else the path itself (its folder for a file).
func localSource(path, root string) (sources.Source, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return sources.Source{}, err
	}
	info, err := os.Stat(abs)
	if errors.Is(err, fs.ErrNotExist) {
		return sources.Source{}, fmt.Errorf("PATH %s does not exist: give a folder (or file) of YAML manifests or a kustomization, or --git-url", path)
	}
	if err != nil {
		return sources.Source{}, err
	}
	if root == "" {
		root = workTree(abs)
	}
	if root == "" {
		root = abs
		if !info.IsDir() {
			root = filepath.Dir(abs)
		}
	}
	if root, err = filepath.Abs(root); err != nil {
		return sources.Source{}, err
	}
	rel, err := filepath.Rel(root, abs)
	if err != nil {
		return sources.Source{}, err
	}
	return sources.Source{Dir: root, Path: filepath.ToSlash(rel)}, nil
}

// workTree returns the closest folder at or above path that holds a .git entry, or "".
func workTree(path string) string {
	for dir := path; ; dir = filepath.Dir(dir) {
		if _, err := os.Lstat(filepath.Join(dir, ".git")); err == nil {
			return dir
		} else if !errors.Is(err, fs.ErrNotExist) {
			return ""
		}
		if filepath.Dir(dir) == dir {
			return ""
		}
	}
}

// marshalStream prints objects as a "---" separated YAML stream with sorted keys.
func marshalStream(b *sources.Bundle) ([]byte, error) {
	var buf bytes.Buffer
	for i, o := range b.Objects {
		y, err := yaml.Marshal(o.Object)
		if err != nil {
			return nil, fmt.Errorf("print object %d: %w", i+1, err)
		}
		if i > 0 {
			buf.WriteString("---\n")
		}
		buf.Write(y)
	}
	return buf.Bytes(), nil
}

func defaultCacheDir() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "converge")
	}
	return filepath.Join(dir, "converge", "git")
}

func defaultKnownHosts() string {
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".ssh", "known_hosts")
}
