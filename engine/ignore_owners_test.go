package engine

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// owned is a managedFields entry of manager owning fields (FieldsV1 JSON).
func owned(manager string, op metav1.ManagedFieldsOperationType, subresource, fields string) metav1.ManagedFieldsEntry {
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, Subresource: subresource, APIVersion: "apps/v1",
		FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}}
}

// web is a Deployment's body with containers (name, image) in the order given.
func web(replicas int64, containers ...[2]string) *unstructured.Unstructured {
	var cs []any
	for _, c := range containers {
		cs = append(cs, map[string]any{"name": c[0], "image": c[1]})
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "web", "namespace": "ns",
			"annotations": map[string]any{OwnerAnnotation: "inv", "note": "n"}, "finalizers": []any{"example.com/keep"}},
		"spec": map[string]any{"replicas": replicas,
			"template": map[string]any{"spec": map[string]any{"containers": cs}}},
	}}
}

const (
	scaleReplicas = `{"f:spec":{"f:replicas":{}}}`
	appImage      = `{"f:spec":{"f:template":{"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{".":{},"f:name":{},"f:image":{}}}}}}}`
)

// TestIgnoredFieldsOfOtherManagers: an ignored field another manager owns in the live object
// and the run's apply does not is left out of the desired object; one the run's apply owns
// (alone or shared) takes the live value; a manager rule finds list elements by their keys in
// each object (positions differ), never leaves out a list element or a key field, and never
// leaves alone what the engine owns (the owner annotation), whoever owns it.
func TestIgnoredFieldsOfOtherManagers(t *testing.T) {
	desired := func() *unstructured.Unstructured {
		return web(2, [2]string{"app", "app:2"}, [2]string{"log", "log:1"})
	}
	live := web(5, [2]string{"proxy", "proxy:1"}, [2]string{"log", "log:1"}, [2]string{"app", "app:mutated"})
	apply, update := metav1.ManagedFieldsOperationApply, metav1.ManagedFieldsOperationUpdate
	for _, tc := range []struct {
		name   string
		rule   IgnoreRule
		fields []metav1.ManagedFieldsEntry
		want   func(u *unstructured.Unstructured) // edits desired() into the expected object
	}{
		{"path another manager owns is left out",
			IgnoreRule{Paths: []string{"/spec/replicas"}},
			[]metav1.ManagedFieldsEntry{owned("kube-controller-manager", update, "scale", scaleReplicas)},
			func(u *unstructured.Unstructured) { unstructured.RemoveNestedField(u.Object, "spec", "replicas") }},
		{"path the run's apply owns takes the live value",
			IgnoreRule{Paths: []string{"/spec/replicas"}},
			[]metav1.ManagedFieldsEntry{owned(FieldManager, apply, "", scaleReplicas)},
			func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, int64(5), "spec", "replicas")
			}},
		{"path shared with the run's apply takes the live value",
			IgnoreRule{Paths: []string{"/spec/replicas"}},
			[]metav1.ManagedFieldsEntry{owned(FieldManager, apply, "", scaleReplicas), owned("hpa", apply, "", scaleReplicas)},
			func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, int64(5), "spec", "replicas")
			}},
		{"path a manager the hand-over takes over owns takes the live value",
			IgnoreRule{Paths: []string{"/spec/replicas"}},
			[]metav1.ManagedFieldsEntry{owned("kustomize-controller", apply, "", scaleReplicas)},
			func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, int64(5), "spec", "replicas")
			}},
		{"path nobody owns takes the live value",
			IgnoreRule{Paths: []string{"/spec/replicas"}},
			nil,
			func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, int64(5), "spec", "replicas")
			}},
		{"manager's scale entry",
			IgnoreRule{Managers: []string{"kube-controller-manager"}},
			[]metav1.ManagedFieldsEntry{owned("kube-controller-manager", update, "scale", scaleReplicas)},
			func(u *unstructured.Unstructured) { unstructured.RemoveNestedField(u.Object, "spec", "replicas") }},
		{"manager's field of a keyed element at another position",
			IgnoreRule{Managers: []string{"webhook"}},
			[]metav1.ManagedFieldsEntry{owned("webhook", update, "", appImage)},
			func(u *unstructured.Unstructured) {
				delete(u.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any), "image")
			}},
		{"manager's field shared with the run's apply takes the live value",
			IgnoreRule{Managers: []string{"web*"}},
			[]metav1.ManagedFieldsEntry{owned("webhook", apply, "", appImage), owned(FieldManager, apply, "", appImage)},
			func(u *unstructured.Unstructured) {
				u.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["image"] = "app:mutated"
			}},
		{"manager of another name",
			IgnoreRule{Managers: []string{"webhook"}},
			[]metav1.ManagedFieldsEntry{owned("kube-controller-manager", update, "scale", scaleReplicas)},
			func(*unstructured.Unstructured) {}},
		{"owner annotation, finalizer element, other annotation",
			IgnoreRule{Managers: []string{"kubectl-annotate"}},
			[]metav1.ManagedFieldsEntry{owned("kubectl-annotate", update, "",
				`{"f:metadata":{"f:annotations":{"f:`+OwnerAnnotation+`":{},"f:note":{}},"f:finalizers":{"v:\"example.com/keep\"":{}}}}`)},
			func(u *unstructured.Unstructured) {
				delete(u.Object["metadata"].(map[string]any)["annotations"].(map[string]any), "note")
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ig, err := newIgnorer(ApplyOptions{Ignore: []IgnoreRule{tc.rule}, TakeOverManagers: DefaultTakeOverManagers()}, "", true)
			if err != nil {
				t.Fatal(err)
			}
			l := live.DeepCopy()
			l.SetManagedFields(tc.fields)
			it := &item{obj: desired()}
			ig.mark(it)
			ig.adjust(it, l)
			want := desired()
			tc.want(want)
			if diff := cmp.Diff(want.Object, it.obj.Object); diff != "" {
				t.Errorf("desired object after adjust (-want +got):\n%s", diff)
			}
		})
	}
}

// TestIgnoreManagersRefused: a manager rule naming no manager, an empty name, too many or
// too long names, or Converge's own manager (by name or by a prefix that covers it) is a
// terminal error naming the rule; other managers, prefixes included, are allowed.
func TestIgnoreManagersRefused(t *testing.T) {
	many := make([]string, MaxIgnoreManagers+1)
	for i := range many {
		many[i] = "m"
	}
	for _, managers := range [][]string{nil, {""}, {"converge"}, {"converge-cli"}, {"conv*"}, {"*"}, {"converge-*"},
		{"ci-bot"}, many, {strings.Repeat("x", MaxIgnoreManagerBytes+1)}} {
		opts := ApplyOptions{FieldManager: "ci-bot", Ignore: []IgnoreRule{{Paths: []string{"/data/a"}}, {Managers: managers}}}
		_, err := newIgnorer(opts, "", true)
		if err == nil || !IsTerminal(err) || !strings.Contains(err.Error(), "ignore rule 1") {
			t.Errorf("managers %q: %v, want a terminal error naming rule 1", managers, err)
		}
	}
	for _, managers := range [][]string{{"kube-controller-manager"}, {"istio-*", "kubectl-scale"}, {"con"}} {
		if _, err := newIgnorer(ApplyOptions{Ignore: []IgnoreRule{{Managers: managers}}}, "", true); err != nil {
			t.Errorf("managers %q: %v, want them allowed", managers, err)
		}
	}
}
