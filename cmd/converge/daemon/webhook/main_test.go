package webhook

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/deploy"
	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// env is the local API server the receiver reads Syncs and Secrets from and patches.
var env *cluster.Cluster

func TestMain(m *testing.M) {
	cluster.Main(m, cluster.API, &env)
}

// installSyncCRD applies the Sync CRD, as the daemon does at start, and waits until Syncs
// are served.
func installSyncCRD(t *testing.T, c client.Client) {
	t.Helper()
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(deploy.SyncCRD, &obj.Object); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Patch(ctx, obj, client.Apply, client.FieldOwner("converge-crd-installer"), client.ForceOwnership); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return c.List(ctx, &v1alpha1.SyncList{}, client.Limit(1)) == nil, nil
	})
	if err != nil {
		t.Fatalf("Syncs not served: %v", err)
	}
}

// deployer creates the ServiceAccount deployer in the fixture's namespace, allowed to manage
// ConfigMaps there and nothing else.
func (h *hookFixture) deployer() {
	h.t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: "deployer"}}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: "deployer"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"*"}}}}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: "deployer"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "deployer"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "deployer", Namespace: h.ns}}}
	for _, o := range []client.Object{sa, role, rb} {
		if err := h.c.Create(ctx, o); err != nil {
			h.t.Fatal(err)
		}
	}
}

// actsAs is the daemon's naming of the user a Sync acts as, with defaultSA as
// --default-service-account.
func actsAs(defaultSA string) func(*v1alpha1.Sync) string {
	return func(s *v1alpha1.Sync) string {
		sa := s.Spec.ServiceAccountName
		if sa == "" {
			sa = defaultSA
		}
		if sa == "" {
			return ""
		}
		return "system:serviceaccount:" + s.Namespace + ":" + sa
	}
}

// sign is the hex HMAC-SHA256 of body with secret, as GitHub signs a delivery.
func sign(secret, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return hex.EncodeToString(mac.Sum(nil))
}
