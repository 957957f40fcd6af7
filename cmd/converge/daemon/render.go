package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/sources/git"
)

// defaultBuildTimeout bounds one Sync's fetch and render, well under the default interval
// (5m): a stuck or slow repository costs its own Sync a retry, never the daemon a worker.
const defaultBuildTimeout = 2 * time.Minute

// defaultFetchTimeout bounds the git fetch of one Sync, a share of the build timeout: a
// remote that hangs or trickles costs its Sync this much, and leaves time to render.
const defaultFetchTimeout = time.Minute

// defaultGitCacheQuota bounds the git cache's disk: 3/4 of the shipped Deployment's cache
// volume (an emptyDir of 1 GiB, deploy/manager), leaving room for fetches in flight.
const defaultGitCacheQuota = 768 << 20

// defaultOCICacheQuota bounds the extracted OCI artifacts on disk: with the git cache's
// 768 MiB, 7/8 of the shipped 1 GiB cache volume, the rest for downloads in flight.
const defaultOCICacheQuota = 128 << 20

// defaultChartCacheQuota bounds the charts fetched from HTTP Helm repositories on disk
// (packaged, a few hundred KiB each): with the git and OCI caches, 15/16 of the shipped
// 1 GiB cache volume.
const defaultChartCacheQuota = 64 << 20

// renderSettings are the daemon's render options (flags of `converge run`).
type renderSettings struct {
	timeout time.Duration  // 0: defaultBuildTimeout
	limits  sources.Limits // zero fields: the defaults
	// allowLocalGit lets Syncs name file:// URLs, local paths and git servers on this
	// machine or its link (--allow-local-git; see git.FetchOptions.AllowLocal).
	allowLocalGit bool
	// maxFetchSize bounds the bytes one fetch downloads (--max-fetch-size); 0: the default.
	maxFetchSize int64
	// fetchTimeout bounds one git fetch (--fetch-timeout), within the build timeout; 0:
	// defaultFetchTimeout.
	fetchTimeout time.Duration
	// cacheQuota bounds the git cache's disk (--git-cache-quota); 0: no limit.
	cacheQuota int64
	// ociCacheQuota bounds the OCI cache's disk (--oci-cache-quota); 0: no limit.
	ociCacheQuota int64
	// chartCacheQuota bounds the chart cache's disk (--chart-cache-quota); 0: no limit.
	chartCacheQuota int64
	// maxIndexSize bounds a Helm repository's index.yaml (--max-index-size); 0: the default.
	maxIndexSize int64
}

// buildTimeout bounds a fetch and render, and separately the decryption that follows it.
func (rs renderSettings) buildTimeout() time.Duration {
	if rs.timeout <= 0 {
		return defaultBuildTimeout
	}
	return rs.timeout
}

// load fetches and renders src within the build timeout. Kustomize builds are isolated:
// the repository is untrusted, so its render can reach no network and is stopped at the
// timeout (see sources.RenderOptions.Isolate). owner is the Sync it is for: the loader's
// render cache keeps the last render of each Sync, not the ones before (LoadOptions.Owner),
// and its namespace shares the render slots with the others (LoadOptions.Tenant).
func (rs renderSettings) load(ctx context.Context, l *sources.Loader, src sources.Source, owner types.NamespacedName,
	unneeded func(string) bool) (*sources.Bundle, error) {
	opts := sources.DefaultLoadOptions()
	opts.Owner, opts.Tenant, opts.Unneeded = owner.String(), owner.Namespace, unneeded
	// The objects stay JSON until a step needs them decoded: the pipeline when it changes
	// them, else the engine, one object at a time (engine.Set.Docs).
	opts.Encoded = true
	opts.Render.Isolate = true
	opts.Render.Limits = rs.limits
	opts.Fetch.AllowLocal = rs.allowLocalGit
	if rs.maxFetchSize > 0 {
		opts.Fetch.MaxFetchSize = rs.maxFetchSize
	}
	opts.Fetch.CacheQuota = rs.cacheQuota
	timeout := rs.buildTimeout()
	opts.Fetch.Timeout = min(rs.fetchTimeout, timeout)
	if rs.fetchTimeout <= 0 {
		opts.Fetch.Timeout = min(defaultFetchTimeout, timeout)
	}
	opts.OCI.AllowLocal, opts.OCI.MaxFetchSize = opts.Fetch.AllowLocal, opts.Fetch.MaxFetchSize
	opts.OCI.Timeout, opts.OCI.CacheQuota = opts.Fetch.Timeout, rs.ociCacheQuota
	opts.Charts.AllowLocal, opts.Charts.Timeout, opts.Charts.CacheQuota = opts.Fetch.AllowLocal, opts.Fetch.Timeout, rs.chartCacheQuota
	if opts.Fetch.MaxFetchSize > 0 {
		opts.Charts.MaxChartSize = min(opts.Charts.MaxChartSize, opts.Fetch.MaxFetchSize)
	}
	if rs.maxIndexSize > 0 {
		opts.Charts.MaxIndexSize = rs.maxIndexSize
	}
	lctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	b, err := l.Load(lctx, src, opts)
	var de *git.DeadlineError
	switch {
	case errors.As(err, &de) && b == nil && lctx.Err() == nil:
		err = fmt.Errorf("%w (--fetch-timeout)", err)
	case err != nil && ctx.Err() == nil && errors.Is(lctx.Err(), context.DeadlineExceeded):
		err = fmt.Errorf("RenderTimeout: fetch and render did not finish within %s (--build-timeout): %w", timeout, err)
	}
	return b, err
}
