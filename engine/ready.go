package engine

import (
	"context"
	"fmt"

	"github.com/fluxcd/cli-utils/pkg/kstatus/polling"
	"github.com/fluxcd/cli-utils/pkg/kstatus/polling/clusterreader"
	pollengine "github.com/fluxcd/cli-utils/pkg/kstatus/polling/engine"
	"github.com/fluxcd/cli-utils/pkg/kstatus/polling/statusreaders"
	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/cli-utils/pkg/object"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// newPoller returns a kstatus poller. In watch mode it reads each object from the watch
// cache, and objects in byMeta as metadata only: their readiness does not depend on their
// spec or status (readyOnExistence), so no full copy of them is cached.
//
// Status is computed by kstatus' generic reader for every kind, from the object alone: the
// default readers of Deployments, ReplicaSets and StatefulSets also list the ReplicaSets and
// Pods they generate, which would make the watch cache hold every Pod of the cluster, for
// detail the engine does not report.
//
// Readiness is judged on the generation the run applied, never on an older copy (I6): an
// object read at a metadata.generation below its entry in applied (the watch cache is behind
// the apply's answer) is InProgress, whatever its old status says.
//
// Kinds that health judges (HealthRules, the CEL expressions of ApplyOptions.HealthExprs)
// are computed by their expressions instead of kstatus, behind the same generation rule.
func (e *Engine) newPoller(w waitSet) *polling.StatusPoller {
	generic := []pollengine.StatusReader{statusreaders.NewGenericStatusReader(e.mapper, atGeneration(w.applied, w.health))}
	if e.cache == nil {
		// From the API server: kstatus' caching reader, one LIST per kind and namespace per
		// poll instead of a GET per object.
		return polling.NewStatusPoller(e.client, e.mapper, polling.Options{CustomStatusReaders: generic})
	}
	r := readinessReader{Reader: e.cache, cache: e.cache, byMeta: w.byMeta, direct: e.client, external: w.external}
	return polling.NewStatusPoller(r, e.mapper, polling.Options{
		CustomStatusReaders:  generic,
		ClusterReaderFactory: pollengine.ClusterReaderFactoryFunc(clusterreader.NewDirectClusterReader),
	})
}

// atGeneration is kstatus' Compute for objects that must be seen at least at the generation
// applied names: a copy older than the apply's answer (a lagging watch cache, or a frozen one)
// says nothing about the rollout just started, so it is InProgress. kstatus itself then
// requires status.observedGeneration to reach metadata.generation, and so do health's
// expressions (HealthRules.compute).
func atGeneration(applied map[object.ObjMetadata]int64, health *HealthRules) statusreaders.StatusFunc {
	return func(u *unstructured.Unstructured) (*status.Result, error) {
		if want := applied[idOf(u)]; u.GetGeneration() < want {
			return &status.Result{Status: status.InProgressStatus,
				Message: fmt.Sprintf("generation %d applied, generation %d observed so far", want, u.GetGeneration())}, nil
		}
		return health.compute(u)
	}
}

// readinessReader is the poller's reader: objects in byMeta are read as metadata only and
// handed to kstatus without spec or status. Objects in external, which the set does not
// apply (spec.healthChecks, depends-on outside the set), are read through the watch cache
// only when it already holds their kind in the form read (metadata or whole objects), and
// otherwise from the API server (direct) with a GET each: reading them through the cache
// would start an informer holding every object of that kind in the cluster for the life of
// the daemon (a Sync naming one Pod would cache them all).
type readinessReader struct {
	client.Reader
	cache    *watchCache
	byMeta   map[object.ObjMetadata]bool
	direct   client.Reader
	external map[object.ObjMetadata]bool
}

// readerOf is where the object id is read from: the cache, unless it is external and the
// cache does not hold its kind in the form byMeta says.
func (r readinessReader) readerOf(id object.ObjMetadata) client.Reader {
	switch {
	case !r.external[id]:
		return r.Reader
	case r.byMeta[id] && r.cache.watchingKind(id.GroupKind), !r.byMeta[id] && r.cache.cachesWhole(id.GroupKind):
		return r.Reader
	}
	return r.direct
}

func (r readinessReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return r.Reader.Get(ctx, key, obj, opts...)
	}
	gvk := u.GroupVersionKind()
	id := object.ObjMetadata{GroupKind: gvk.GroupKind(), Namespace: key.Namespace, Name: key.Name}
	reader := r.readerOf(id)
	if !r.byMeta[id] {
		return reader.Get(ctx, key, obj, opts...)
	}
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(gvk)
	if err := reader.Get(ctx, key, m, opts...); err != nil {
		return err
	}
	meta, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&m.ObjectMeta)
	if err != nil {
		return fmt.Errorf("%s: metadata: %w", key, err)
	}
	u.Object = map[string]any{"apiVersion": gvk.GroupVersion().String(), "kind": gvk.Kind, "metadata": meta}
	return nil
}

// readyOnExistence reports whether kstatus computes the readiness of desired from its
// metadata alone (it exists, it is not being deleted): kinds without a status, and Services
// that do not wait for a load balancer.
func readyOnExistence(desired *unstructured.Unstructured) bool {
	gk := desired.GroupVersionKind().GroupKind()
	switch {
	case gk.Group == "" && (gk.Kind == "ConfigMap" || gk.Kind == "Secret" || gk.Kind == "ServiceAccount"):
		return true
	case gk.Group == "rbac.authorization.k8s.io":
		return gk.Kind == "Role" || gk.Kind == "RoleBinding" || gk.Kind == "ClusterRole" || gk.Kind == "ClusterRoleBinding"
	case gk.Group == "" && gk.Kind == "Service":
		t, _, _ := unstructured.NestedString(desired.Object, "spec", "type")
		return t != "LoadBalancer"
	}
	return false
}
