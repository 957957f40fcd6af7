// Package cluster starts a real local Kubernetes control plane for tests, `make run`,
// `make cluster` and the benchmark: etcd and kube-apiserver (profile API), plus
// kube-controller-manager, kube-scheduler and kwok with one fake node (profile Full), on free
// loopback ports with TLS, an admin token user and a generated kubeconfig. It stops everything
// it started, also when a test fails or the run is interrupted.
//
// The binaries come from e2e/tools/build.sh. Production code must not import this package.
package cluster
