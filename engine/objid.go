package engine

import (
	fluxobject "github.com/fluxcd/cli-utils/pkg/object"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/object"
)

// This file is the one place where object IDs of fluxcd/pkg/ssa's kstatus fork
// (github.com/fluxcd/cli-utils) meet the sigs.k8s.io/cli-utils IDs the rest of Converge
// uses. Both print ns_name_group_kind; only the Go types differ.

// idOf returns the sigs.k8s.io/cli-utils ID of u.
func idOf(u *unstructured.Unstructured) object.ObjMetadata {
	return object.UnstructuredToObjMetadata(u)
}

// toFlux converts an ID to the fork's type, for the kstatus poller.
func toFlux(id object.ObjMetadata) fluxobject.ObjMetadata {
	return fluxobject.ObjMetadata{Namespace: id.Namespace, Name: id.Name, GroupKind: id.GroupKind}
}

// fromFlux converts the fork's ID back to ours.
func fromFlux(id fluxobject.ObjMetadata) object.ObjMetadata {
	return object.ObjMetadata{Namespace: id.Namespace, Name: id.Name, GroupKind: id.GroupKind}
}
