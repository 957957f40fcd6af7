// Package deploy holds the kustomize base that runs the converge daemon in a cluster, and
// embeds the Sync CRD so the daemon and tests install exactly the file users apply.
package deploy

import _ "embed"

// SyncCRD is the CustomResourceDefinition of converge.dev/v1alpha1 Sync.
//
//go:embed crd/converge.dev_syncs.yaml
var SyncCRD []byte
