package engine

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestAppliedAsDesired checks the local judgment of appliedAsDesired on live objects whose
// managedFields are written by hand: it trusts an object only when our apply entry owns
// exactly the desired fields at the desired values, and says "unsure" (false, a dry-run)
// on anything else. The API tests (TestRestartFindsOutOfBandEdits) check the same against
// what the API server really records.
func TestAppliedAsDesired(t *testing.T) {
	svc := func(ports []any, selector map[string]any) *unstructured.Unstructured {
		return obj("v1", "Service", "ns", "s", map[string]any{"spec": map[string]any{"ports": ports, "selector": selector}})
	}
	port := func(kv ...any) map[string]any {
		m := map[string]any{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	desired := svc([]any{port("name", "http", "port", int64(80))}, map[string]any{"app": "a"})
	const owned = `{"f:spec":{"f:ports":{"k:{\"port\":80,\"protocol\":\"TCP\"}":{".":{},"f:name":{},"f:port":{}}},"f:selector":{}}}`
	live := func(ports []any, selector map[string]any, entries ...metav1.ManagedFieldsEntry) *unstructured.Unstructured {
		u := svc(ports, selector)
		u.SetUID("u1")
		u.SetResourceVersion("7")
		_ = unstructured.SetNestedField(u.Object, "10.0.0.1", "spec", "clusterIP")
		u.SetManagedFields(entries)
		return u
	}
	ours := func(fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: FieldManager, Operation: metav1.ManagedFieldsOperationApply, APIVersion: "v1",
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}}
	}
	other := func(manager string, op metav1.ManagedFieldsOperationType, fields string) metav1.ManagedFieldsEntry {
		e := ours(fields)
		e.Manager, e.Operation = manager, op
		return e
	}
	livePorts := []any{port("name", "http", "port", int64(80), "protocol", "TCP", "targetPort", int64(80))}
	sel := map[string]any{"app": "a"}
	deleting := live(livePorts, sel, ours(owned))
	now := metav1.Now()
	deleting.SetDeletionTimestamp(&now)
	tests := []struct {
		name    string
		desired *unstructured.Unstructured
		live    *unstructured.Unstructured
		want    bool
	}{
		{"as applied, defaults added", desired, live(livePorts, sel, ours(owned)), true},
		{"others own fields outside desired", desired, live(livePorts, sel, ours(owned),
			other("kube-controller-manager", metav1.ManagedFieldsOperationUpdate, `{"f:metadata":{"f:annotations":{"f:x":{}}}}`)), true},
		{"no entry of ours", desired, live(livePorts, sel), false},
		{"our entry at another apiVersion", desired, live(livePorts, sel, func() metav1.ManagedFieldsEntry {
			e := ours(owned)
			e.APIVersion = "v2"
			return e
		}()), false},
		{"being deleted", desired, deleting, false},
		{"owned field desired lacks", desired, live(livePorts, sel, ours(`{"f:spec":{"f:ports":{"k:{\"port\":80,\"protocol\":\"TCP\"}":{".":{},"f:name":{},"f:port":{}}},"f:selector":{},"f:type":{}}}`)), false},
		{"atomic value with more than desired", desired, live(livePorts, map[string]any{"app": "a", "x": "y"}, ours(owned)), false},
		{"atomic value taken by another manager", desired, live(livePorts, sel,
			ours(`{"f:spec":{"f:ports":{"k:{\"port\":80,\"protocol\":\"TCP\"}":{".":{},"f:name":{},"f:port":{}}}}}`),
			other("kubectl-edit", metav1.ManagedFieldsOperationUpdate, `{"f:spec":{"f:selector":{}}}`)), false},
		{"scalar taken, same value", desired, live(livePorts, sel,
			ours(`{"f:spec":{"f:ports":{"k:{\"port\":80,\"protocol\":\"TCP\"}":{".":{},"f:port":{}}},"f:selector":{}}}`),
			other("kubectl-edit", metav1.ManagedFieldsOperationUpdate, `{"f:spec":{"f:ports":{"k:{\"port\":80,\"protocol\":\"TCP\"}":{"f:name":{}}}}}`)), true},
		{"scalar taken, other value", desired, live([]any{port("name", "web", "port", int64(80), "protocol", "TCP")}, sel,
			ours(`{"f:spec":{"f:ports":{"k:{\"port\":80,\"protocol\":\"TCP\"}":{".":{},"f:port":{}}},"f:selector":{}}}`)), false},
		{"scalar removed", desired, live([]any{port("port", int64(80), "protocol", "TCP")}, sel, ours(owned)), false},
		{"elements in another order", svc([]any{port("name", "a", "port", int64(80)), port("name", "b", "port", int64(81))}, sel),
			live([]any{port("name", "b", "port", int64(81), "protocol", "TCP"), port("name", "a", "port", int64(80), "protocol", "TCP")}, sel,
				ours(`{"f:spec":{"f:ports":{"k:{\"port\":80,\"protocol\":\"TCP\"}":{".":{},"f:name":{},"f:port":{}},"k:{\"port\":81,\"protocol\":\"TCP\"}":{".":{},"f:name":{},"f:port":{}}},"f:selector":{}}}`)), false},
		{"two elements in order", svc([]any{port("name", "a", "port", int64(80)), port("name", "b", "port", int64(81))}, sel),
			live([]any{port("name", "a", "port", int64(80), "protocol", "TCP"), port("name", "b", "port", int64(81), "protocol", "TCP")}, sel,
				ours(`{"f:spec":{"f:ports":{"k:{\"port\":80,\"protocol\":\"TCP\"}":{".":{},"f:name":{},"f:port":{}},"k:{\"port\":81,\"protocol\":\"TCP\"}":{".":{},"f:name":{},"f:port":{}}},"f:selector":{}}}`)), true},
		{"element added", desired, live(append(livePorts, port("port", int64(81), "protocol", "TCP")), sel, ours(owned)), false},
		{"element of another protocol", desired, live([]any{port("name", "http", "port", int64(80), "protocol", "UDP")}, sel,
			ours(`{"f:spec":{"f:ports":{"k:{\"port\":80,\"protocol\":\"UDP\"}":{".":{},"f:name":{},"f:port":{}}},"f:selector":{}}}`)), false},
		{"positional list key", desired, live(livePorts, sel,
			ours(`{"f:spec":{"f:ports":{"i:0":{".":{},"f:name":{},"f:port":{}}},"f:selector":{}}}`)), false},
		{"unreadable fieldsV1", desired, live(livePorts, sel, ours(`[1]`)), false},
		{"float for an integer", svc([]any{port("name", "http", "port", 80.0)}, sel), live(livePorts, sel, ours(owned)), true},
		{"float with a fraction", svc([]any{port("name", "http", "port", 80.5)}, sel), live(livePorts, sel, ours(owned)), false},
		{"map not owned", obj("v1", "Service", "ns", "s", map[string]any{"spec": map[string]any{"ports": []any{port("name", "http", "port", int64(80))},
			"selector": sel, "extra": map[string]any{"a": "b"}}}), live(livePorts, sel, ours(owned)), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := &unstructured.Unstructured{Object: runtime.DeepCopyJSON(tc.desired.Object)}
			if got := appliedAsDesired(d, tc.live, FieldManager); got != tc.want {
				t.Errorf("appliedAsDesired = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestAppliedAsDesiredSets checks a set list (v: keys, e.g. finalizers): the same values in
// the same order are trusted; another order (which an update can make without touching
// managedFields), a missing or an extra value is not.
func TestAppliedAsDesiredSets(t *testing.T) {
	cm := func(fin ...any) *unstructured.Unstructured {
		u := configMap("ns", "c", map[string]any{"k": "v"})
		_ = unstructured.SetNestedSlice(u.Object, fin, "metadata", "finalizers")
		return u
	}
	entry := metav1.ManagedFieldsEntry{Manager: FieldManager, Operation: metav1.ManagedFieldsOperationApply, APIVersion: "v1",
		FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:data":{"f:k":{}},"f:metadata":{"f:finalizers":{"v:\"a\"":{},"v:\"b\"":{}}}}`)}}
	withEntry := func(u *unstructured.Unstructured) *unstructured.Unstructured {
		u.SetManagedFields([]metav1.ManagedFieldsEntry{entry})
		return u
	}
	for _, tc := range []struct {
		name          string
		desired, live []any
		want          bool
	}{
		{"same order", []any{"a", "b"}, []any{"a", "b"}, true},
		{"other order", []any{"a", "b"}, []any{"b", "a"}, false},
		{"one more live", []any{"a", "b"}, []any{"a", "b", "c"}, false},
		{"one missing live", []any{"a", "b"}, []any{"a", "c"}, false},
		{"desired lacks an owned value", []any{"a"}, []any{"a"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := appliedAsDesired(cm(tc.desired...), withEntry(cm(tc.live...)), FieldManager); got != tc.want {
				t.Errorf("appliedAsDesired = %v, want %v", got, tc.want)
			}
		})
	}
}
