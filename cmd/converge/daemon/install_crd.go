package daemon

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/deploy"
	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// crdFieldManager applies the CRD at daemon start. It is not the engine's manager, so the
// daemon's start-up apply neither strips what `converge install` set on the CRD (labels,
// the owner annotation) nor collides with it.
const crdFieldManager = "converge-crd-installer"

// installSyncCRD server-side applies the embedded Sync CRD and waits until it is Established
// and discovery serves it: the manager's REST mapper reads discovery when the controller
// registers its index, and a group Established but not yet in discovery made the daemon
// exit at start ("no matches for kind Sync in version converge.dev/v1alpha1", seen under load).
func installSyncCRD(ctx context.Context, cfg *rest.Config, c client.Client) error {
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(deploy.SyncCRD, &obj.Object); err != nil {
		return fmt.Errorf("embedded Sync CRD: %w", err)
	}
	if err := c.Patch(ctx, obj, client.Apply, client.FieldOwner(crdFieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("install CRD %s: %w", obj.GetName(), err)
	}
	if err := engine.WaitEstablished(ctx, c, []string{obj.GetName()}, time.Minute); err != nil {
		return fmt.Errorf("install CRD %s: %w", obj.GetName(), err)
	}
	if err := waitServed(ctx, cfg, time.Minute); err != nil {
		return fmt.Errorf("install CRD %s: %w", obj.GetName(), err)
	}
	return nil
}

// waitServed waits until discovery lists syncs in converge.dev/v1alpha1.
func waitServed(ctx context.Context, cfg *rest.Config, timeout time.Duration) error {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	gv := v1alpha1.GroupVersion.String()
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		list, err := dc.ServerResourcesForGroupVersion(gv)
		if err != nil {
			return false, nil // not served yet
		}
		for _, r := range list.APIResources {
			if r.Name == "syncs" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("Established, but discovery did not serve %s syncs within %s: %w", gv, timeout, err)
	}
	return nil
}
