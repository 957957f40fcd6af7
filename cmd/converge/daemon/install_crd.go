package daemon

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/deploy"
	"github.com/converge-dev/converge/engine"
)

// crdFieldManager applies the CRD at daemon start. It is not the engine's manager, so the
// daemon's start-up apply neither strips what `converge install` set on the CRD (labels,
// the owner annotation) nor collides with it.
const crdFieldManager = "converge-crd-installer"

// installSyncCRD server-side applies the embedded Sync CRD and waits until it is Established.
func installSyncCRD(ctx context.Context, c client.Client) error {
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
	return nil
}
