package cluster

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Main starts one control plane for a test package, runs the tests, stops the control plane
// and exits. Use it from TestMain:
//
//	var env *cluster.Cluster
//	func TestMain(m *testing.M) { cluster.Main(m, cluster.API, &env) }
//
// With -short the control plane is not started and *c stays nil; tests that need it call
// Require. A failed start fails the package.
func Main(m *testing.M, profile Profile, c **Cluster) {
	os.Exit(run(m, profile, c))
}

func run(m *testing.M, profile Profile, c **Cluster) int {
	if !testingShort() {
		opts := DefaultOptions()
		opts.Profile = profile
		cl, err := Start(context.Background(), opts)
		if err != nil {
			fmt.Fprintf(os.Stderr, "start %s control plane: %v\n", profile, err)
			return 1
		}
		defer cl.Stop()
		*c = cl
	}
	return m.Run()
}

// testingShort reports -short before flag.Parse has run inside m.Run.
func testingShort() bool {
	for _, a := range os.Args[1:] {
		if a == "-test.short" || a == "-test.short=true" || a == "--test.short" {
			return true
		}
	}
	return false
}

// Require skips t when the control plane was not started (-short).
func Require(t testing.TB, c *Cluster) {
	t.Helper()
	if c == nil {
		t.Skip("needs the local control plane (not started with -short)")
	}
}

var nsCounter atomic.Int64

// Namespace creates a fresh namespace for t, deleted when t ends.
func (c *Cluster) Namespace(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t%d-%s", nsCounter.Add(1), sanitize(t.Name()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := c.Clientset().CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = c.Clientset().CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
	})
	return name
}

// sanitize turns a test name into a DNS label fragment.
func sanitize(s string) string {
	s = strings.ToLower(s)
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s) && len(b) < 40; i++ {
		ch := s[i]
		if (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') {
			b = append(b, ch)
		} else if len(b) > 0 && b[len(b)-1] != '-' {
			b = append(b, '-')
		}
	}
	return strings.TrimRight(string(b), "-")
}

// Client returns an uncached controller-runtime client straight to the API server, with the
// built-in kinds and whatever adds registers (v1alpha1.AddToScheme, apiextensionsv1.AddToScheme…).
func (c *Cluster) Client(t testing.TB, adds ...func(*runtime.Scheme) error) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range append([]func(*runtime.Scheme) error{clientgoscheme.AddToScheme}, adds...) {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	cl, err := client.New(c.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}
