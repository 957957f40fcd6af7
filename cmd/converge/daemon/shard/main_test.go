package shard

import (
	"testing"

	"github.com/converge-dev/converge/e2e/cluster"
)

// env is the local API server of the tests that need one (renew_test.go).
var env *cluster.Cluster

func TestMain(m *testing.M) {
	cluster.Main(m, cluster.API, &env)
}
