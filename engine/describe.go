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

// describeAt is Describe after the place the object was rendered from, when known:
// "apps/web.yaml:3: ConfigMap apps/web".
func describeAt(origin string, id object.ObjMetadata) string {
	if origin == "" {
		return Describe(id)
	}
	return origin + ": " + Describe(id)
}
