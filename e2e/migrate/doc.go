// Package migrate proves the move from Flux's kustomize-controller to Converge against the
// real controller, built from the module proxy, on the Full control plane (Pods run on the
// kwok node, an HPA is served by kube-controller-manager).
package migrate
