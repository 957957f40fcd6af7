// Package e2e holds black-box tests of the built converge binary and the import-direction
// test. Its sub-packages hold what tests, `make run` and the benchmark share:
//
//   - e2e/cluster: the real local control plane (profiles api and full);
//   - e2e/tools: the tools module and build.sh that build etcd, kube-apiserver,
//     kube-controller-manager, kube-scheduler and kwok from the Go module proxy;
//   - e2e/fault: the fault-injecting, request-counting transport, the TLS fault proxy in
//     front of kube-apiserver for the built binary, and stale-read views;
//   - e2e/checker: the invariant checker (I1, I2, I5) that watches a namespace during a run;
//   - e2e/gitserver: git smart HTTP on loopback (git http-backend);
//   - e2e/registry: a real OCI registry (Debian's docker-registry) with basic auth and TLS,
//     and Flux-format artifacts pushed with oras-go;
//   - e2e/sopsfixture: age keys and SOPS-encrypted manifests made with the sops library;
//   - e2e/binary: build and run the converge binary;
//   - e2e/devcluster: `make cluster` and the `make run` demo;
//   - e2e/deploy: the deploy/ base end to end; e2e/bench: `make bench`.
//
// Production code never imports e2e.
package e2e
