package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/klog/v2"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// syncAPI reads Syncs as kubectl does, through the dynamic client: the objects come back as
// the API server sends them (what -o json prints), and no discovery request precedes the
// list, so an unreachable cluster fails on the one request that matters.
type syncAPI struct {
	syncs dynamic.NamespaceableResourceInterface
	dc    dynamic.Interface
}

var syncsResource = v1alpha1.GroupVersion.WithResource("syncs")

// newSyncAPI returns a syncAPI for the kubeconfig of kube; a timeout above zero bounds each
// request below --request-timeout (completions, which must never hang a shell).
func newSyncAPI(kube *kubeFlags, timeout time.Duration) (*syncAPI, error) {
	cfg, err := kube.restConfig()
	if err != nil {
		return nil, err
	}
	if timeout > 0 && (cfg.Timeout == 0 || cfg.Timeout > timeout) {
		cfg.Timeout = timeout // otherwise --request-timeout's, as kubectl
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return &syncAPI{syncs: dc.Resource(syncsResource), dc: dc}, nil
}

// where names the namespace ns ("" for every namespace) in messages.
func where(ns string) string {
	if ns == "" {
		return "in every namespace"
	}
	return "in namespace " + ns
}

// get returns the Syncs of ns ("" for all) that sel selects, or those named (in the order
// given), and the resourceVersion a watch starts from. Names that are not found are an error
// returned with the Syncs that are.
func (a *syncAPI) get(ctx context.Context, ns string, names []string, sel labels.Selector) ([]unstructured.Unstructured, string, error) {
	list, err := a.syncs.Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String(), FieldSelector: fieldsForNames(names)})
	if err != nil {
		return nil, "", explainSyncs(err, "list syncs "+where(ns))
	}
	items := list.Items
	slices.SortFunc(items, func(a, b unstructured.Unstructured) int {
		return strings.Compare(a.GetNamespace()+"/"+a.GetName(), b.GetNamespace()+"/"+b.GetName())
	})
	if len(names) == 0 {
		return items, list.GetResourceVersion(), nil
	}
	byName := map[string]unstructured.Unstructured{}
	for _, s := range items {
		byName[s.GetName()] = s
	}
	found, missing := []unstructured.Unstructured{}, []string{}
	for _, n := range names {
		if s, ok := byName[n]; ok {
			found = append(found, s)
		} else {
			missing = append(missing, ns+"/"+n)
		}
	}
	if len(missing) > 0 {
		what := "sync " + missing[0]
		if len(missing) > 1 {
			what = "syncs " + strings.Join(missing, ", ")
		}
		return found, "", fmt.Errorf("%s not found; converge status -n %s lists the Syncs of %s (-A of every namespace)", what, ns, ns)
	}
	return found, list.GetResourceVersion(), nil
}

// watch calls fn with each Sync of ns that sel selects (or of names) that changes after
// resourceVersion rv ("" for now), until ctx ends. A watch the API server closes is opened
// again from the last version seen.
func (a *syncAPI) watch(ctx context.Context, ns string, names []string, sel labels.Selector, rv string,
	fn func(*unstructured.Unstructured) error) error {
	opts := metav1.ListOptions{LabelSelector: sel.String(), FieldSelector: fieldsForNames(names)}
	if rv == "" {
		list, err := a.syncs.Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: opts.LabelSelector, FieldSelector: opts.FieldSelector, Limit: 1})
		if err != nil {
			return explainSyncs(err, "list syncs "+where(ns))
		}
		rv = list.GetResourceVersion()
	}
	lw := &cache.ListWatch{WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.LabelSelector, o.FieldSelector = opts.LabelSelector, opts.FieldSelector
		return a.syncs.Namespace(ns).Watch(ctx, o)
	}}
	// The retry watcher logs each failed attempt to reopen the watch (every second while the
	// cluster is unreachable) and then retries anyway; the watch resumes when the cluster is
	// back. What it cannot retry (a refused permission, a version too old) comes as an event.
	rw, err := watchtools.NewRetryWatcherWithContext(klog.NewContext(ctx, logr.Discard()), rv, lw)
	if err != nil {
		return fmt.Errorf("watch syncs %s: %w", where(ns), err)
	}
	defer rw.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil // interrupted: the end a watch waits for
		case ev, ok := <-rw.ResultChan():
			if !ok {
				return nil
			}
			switch ev.Type {
			case watch.Error:
				err := apierrors.FromObject(ev.Object)
				if apierrors.IsGone(err) || apierrors.IsResourceExpired(err) {
					return fmt.Errorf("watch syncs %s: %w; the watch fell behind the API server's history: run the command again", where(ns), err)
				}
				return explainSyncs(err, "watch syncs "+where(ns))
			case watch.Bookmark:
				continue
			}
			obj, ok := ev.Object.(*unstructured.Unstructured)
			if !ok || (len(names) > 1 && !slices.Contains(names, obj.GetName())) {
				continue
			}
			if err := fn(obj); err != nil {
				return err
			}
		}
	}
}

// typedSyncs converts the Syncs the API server sent into the Go type the table reads.
func typedSyncs(items []unstructured.Unstructured) ([]v1alpha1.Sync, error) {
	syncs := make([]v1alpha1.Sync, len(items))
	for i := range items {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(items[i].Object, &syncs[i]); err != nil {
			return nil, fmt.Errorf("sync %s/%s: %w", items[i].GetNamespace(), items[i].GetName(), err)
		}
	}
	return syncs, nil
}
