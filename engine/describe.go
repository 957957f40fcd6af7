package engine

import "sigs.k8s.io/cli-utils/pkg/object"

// Describe names an object the way its author wrote it and kubectl prints it:
// "Kind namespace/name", or "Kind name" for a cluster-scoped object. Messages use it instead
// of the inventory's ID ("ns_name_group_Kind"), which nobody writes.
func Describe(id object.ObjMetadata) string {
	if id.Namespace == "" {
		return id.GroupKind.Kind + " " + id.Name
	}
	return id.GroupKind.Kind + " " + id.Namespace + "/" + id.Name
}

// describe names the item and, when the Set said where it was rendered from, that place
// first: "apps/web.yaml:3: ConfigMap apps/web".
func (it *item) describe() string {
	if it.origin == "" {
		return Describe(it.id)
	}
	return it.origin + ": " + Describe(it.id)
}
