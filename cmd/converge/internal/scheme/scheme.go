// Package scheme is the runtime.Scheme shared by the converge CLI verbs and the daemon.
package scheme

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// New returns a scheme that knows the built-in kinds, CRDs and Sync: what the CLI verbs and
// the daemon read and write with typed clients.
func New() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err) // a programming error: the schemes are static
		}
	}
	return s
}
