package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/cmd/converge/daemon"
	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/sources/git"
	"github.com/converge-dev/converge/sources/pipeline"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// syncSourceFetchTimeout bounds the git fetch of a Sync's source by the CLI.
const syncSourceFetchTimeout = 2 * time.Minute

// revisionCommit reads the commit out of a git revision ("main@sha1:<hex>", "sha1:<hex>").
var revisionCommit = regexp.MustCompile(`(?:^|@)sha1:([0-9a-f]{40})$`)

// errUnsupportedSource is why a Sync's source cannot be rendered by the CLI.
var errUnsupportedSource = errors.New("the CLI renders the git sources of Syncs, without spec.source.helm, " +
	"spec.postBuild or spec.decryption; render this one with converge apply --dry-run and the matching flags")

// syncSource is what the CLI renders of the Sync s: its git repository, spec.path with its
// inline build fields (daemon.BuildFields), and the commit of its last applied revision (the head of spec.source.git.ref when it applied
// none, or with latest). A secretRef is read with the kubeconfig's credentials, not the Sync's identity:
// the user runs the command, so what they may read is what they may render. Helm, OCI,
// chart repositories, substitution and decryption are the daemon's alone for now
// (errUnsupportedSource).
func syncSource(ctx context.Context, c client.Client, s *v1alpha1.Sync, latest bool) (sources.Source, error) {
	g := s.Spec.Source.Git
	if g == nil || s.Spec.Source.Helm != nil || s.Spec.PostBuild != nil || s.Spec.Decryption != nil {
		return sources.Source{}, fmt.Errorf("sync %s/%s: %w", s.Namespace, s.Name, errUnsupportedSource)
	}
	ref := git.Ref{Branch: g.Ref.Branch, Tag: g.Ref.Tag, SemVer: g.Ref.SemVer, Commit: g.Ref.Commit}
	if ref == (git.Ref{}) {
		ref.Branch = "main"
	}
	if m := revisionCommit.FindStringSubmatch(s.Status.LastAppliedRevision); m != nil && !latest {
		// The branch (or tag) stays: the revision then reads as the daemon's "main@sha1:…".
		ref.SemVer, ref.Commit = "", m[1]
		if name, _, ok := strings.Cut(s.Status.LastAppliedRevision, "@"); ok && ref.Branch == "" && ref.Tag == "" {
			ref.Branch = name
		}
	}
	repo := git.Repository{URL: g.URL, Ref: ref}
	if g.SecretRef != nil {
		sec := &corev1.Secret{}
		key := client.ObjectKey{Namespace: s.Namespace, Name: g.SecretRef.Name}
		if err := c.Get(ctx, key, sec); err != nil {
			return sources.Source{}, fmt.Errorf("sync %s/%s: spec.source.git.secretRef: Secret %s: %w", s.Namespace, s.Name, key, err)
		}
		repo.Auth = git.Auth{
			Username: string(sec.Data["username"]), Password: string(sec.Data["password"]),
			BearerToken: string(sec.Data["bearerToken"]), SSHPrivateKey: sec.Data["identity"],
			SSHKnownHosts: sec.Data["known_hosts"],
		}
	}
	overlay, _ := daemon.BuildFields(s)
	return sources.Source{Git: repo, Path: s.Spec.Path, Overlay: overlay}, nil
}

// addAllowLocalGitFlag registers --allow-local-git, bound to allow.
func addAllowLocalGitFlag(cmd *cobra.Command, allow *bool) {
	cmd.Flags().BoolVar(allow, "allow-local-git", false,
		"let the Sync's git URL be file:// or on this machine or its link (refused otherwise, as by the daemon)")
}

// loadSyncSource fetches and renders the Sync s's source (syncSource) as `converge build`
// renders a --git-url: isolated, no remote bases, then gives every object the Sync's
// spec.commonMetadata, as the daemon does. The URL is the Sync author's choice, not the
// user's, so a file:// URL or an address on this machine or its link is refused, as the daemon
// refuses it, unless allowLocal (--allow-local-git).
func loadSyncSource(ctx context.Context, c client.Client, s *v1alpha1.Sync, allowLocal, latest bool) (*sources.Bundle, error) {
	src, err := syncSource(ctx, c, s, latest)
	if err != nil {
		return nil, err
	}
	opts := sources.DefaultLoadOptions()
	opts.Fetch.Timeout = syncSourceFetchTimeout
	opts.Fetch.AllowLocal = allowLocal
	opts.Render.Isolate = true
	b, err := sources.NewLoaderSized(defaultCacheDir(), loadOnce).Load(ctx, src, opts)
	if err != nil && !(errors.Is(err, sources.ErrEmptyRender) && s.Spec.AllowEmpty && b != nil) {
		return nil, fmt.Errorf("sync %s/%s: source %s: %w", s.Namespace, s.Name, s.Spec.Source.Git.URL, err)
	}
	if _, md := daemon.BuildFields(s); md != nil && b != nil {
		res, err := pipeline.Prepare(ctx, b, pipeline.Options{Metadata: md})
		if err != nil {
			return nil, fmt.Errorf("sync %s/%s: %w", s.Namespace, s.Name, err)
		}
		b = res.Bundle
	}
	return b, nil
}
