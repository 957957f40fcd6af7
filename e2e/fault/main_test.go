package fault

import (
	"testing"

	"github.com/converge-dev/converge/e2e/cluster"
)

// env is the real local API server of the tests that need one (proxy, stale reads); the
// Transport's own tests run without it, also with -short.
var env *cluster.Cluster

func TestMain(m *testing.M) { cluster.Main(m, cluster.API, &env) }
