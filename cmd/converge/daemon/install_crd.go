package daemon

import (
	"context"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/deploy"
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
	crd := &apiextensionsv1.CustomResourceDefinition{}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKey{Name: obj.GetName()}, crd); err != nil {
			return false, nil
		}
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("CRD %s not Established: %w", obj.GetName(), err)
	}
	return nil
}
