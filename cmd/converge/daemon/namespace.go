package daemon

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ensureNamespace creates namespace name if it is missing. With namespaced RBAC (creating
// namespaces is forbidden) it is expected to exist, and nothing is done.
func ensureNamespace(ctx context.Context, c client.Client, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		if apierrors.IsForbidden(err) {
			return nil // running with namespaced RBAC: the namespace is expected to exist
		}
		return fmt.Errorf("namespace %s: %w", name, err)
	}
	return nil
}
