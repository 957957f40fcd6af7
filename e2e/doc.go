// Package e2e holds black-box tests of the built converge binary. Its sub-packages hold the
// local control plane (e2e/cluster) used by tests, `make run` and the benchmark, and the
// tools module (e2e/tools) that builds etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and kwok from the Go module proxy.
//
// Production code never imports e2e.
package e2e
