package engine

import (
	"context"
	"fmt"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// cacheReadTimeout bounds a read from the watch cache, which blocks until the informer of a
// new kind has synced; past it the engine reads from the API server instead (for example when
// RBAC allows get but not a cluster-wide list and watch of a kind).
const cacheReadTimeout = 30 * time.Second

// watchCache is a watch cache of the kinds the engine manages, with managedFields stripped
// so it stays small. It is started by Engine.Run.
type watchCache struct {
	cache  cache.Cache
	direct client.Reader
}

func newWatchCache(cfg *rest.Config, httpClient *http.Client, c client.Client) (*watchCache, error) {
	wc, err := cache.New(cfg, cache.Options{
		HTTPClient:       httpClient,
		Scheme:           c.Scheme(),
		Mapper:           c.RESTMapper(),
		DefaultTransform: cache.TransformStripManagedFields(),
	})
	if err != nil {
		return nil, fmt.Errorf("engine: watch cache: %w", err)
	}
	return &watchCache{cache: wc, direct: c}, nil
}

// Get reads obj from the cache, falling back to the API server when the cache cannot
// answer in time. NotFound from the cache is trusted (callers that act on it use
// preconditions or re-check).
func (w *watchCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	cctx, cancel := context.WithTimeout(ctx, cacheReadTimeout)
	defer cancel()
	err := w.cache.Get(cctx, key, obj, opts...)
	if err == nil || apierrors.IsNotFound(err) {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return w.direct.Get(ctx, key, obj, opts...)
}

// List reads from the cache, like Get.
func (w *watchCache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	cctx, cancel := context.WithTimeout(ctx, cacheReadTimeout)
	defer cancel()
	if err := w.cache.List(cctx, list, opts...); err == nil || ctx.Err() != nil {
		return err
	}
	return w.direct.List(ctx, list, opts...)
}

// cachedLive reads the live object of u from the watch cache; nil when it does not exist.
func (w *watchCache) cachedLive(ctx context.Context, u *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(u.GroupVersionKind())
	err := w.Get(ctx, client.ObjectKeyFromObject(u), live)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return live, err
}
