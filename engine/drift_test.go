package engine

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/cli-utils/pkg/object"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// webDeployment is a Deployment with one container "web" and a label team, at replicas.
func webDeployment(ns string, replicas int64) *unstructured.Unstructured {
	labels := map[string]any{"app": "web"}
	d := obj("apps/v1", "Deployment", ns, "web", map[string]any{"spec": map[string]any{
		"replicas": replicas,
		"selector": map[string]any{"matchLabels": labels},
		"template": map[string]any{
			"metadata": map[string]any{"labels": labels},
			"spec": map[string]any{"containers": []any{
				map[string]any{"name": "web", "image": "registry.example/web:1"},
			}},
		},
	}})
	d.SetLabels(map[string]string{"team": "a"})
	return d
}

func deploymentID(ns, name string) object.ObjMetadata {
	return object.ObjMetadata{Namespace: ns, Name: name, GroupKind: schema.GroupKind{Group: "apps", Kind: "Deployment"}}
}

// edit changes u's live copy with mutate, as `kubectl edit` does: a plain update under the
// field manager kubectl-edit.
func (h *harness) edit(apiVersion, kind, name string, mutate func(u *unstructured.Unstructured)) {
	h.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error { // controllers write too
		live := h.live(apiVersion, kind, h.ns, name)
		mutate(live)
		return h.plain.Update(h.ctx, live, client.FieldOwner("kubectl-edit"))
	})
	if err != nil {
		h.t.Fatal(err)
	}
}

// untilDrift applies objs until the run reports drift (the watch cache may show an edit a
// moment late, and the memo decides until it does) and returns that run's result.
func (h *harness) untilDrift(opts ApplyOptions, objs ...*unstructured.Unstructured) *Result {
	h.t.Helper()
	for range 30 {
		h.rt.Reset()
		if res := h.apply(opts, objs...); len(res.Drift) > 0 {
			return res
		}
		time.Sleep(100 * time.Millisecond)
	}
	h.t.Fatal("no run reported the out-of-band change as drift")
	return nil
}

func reportAll(object.ObjMetadata) bool { return true }

// TestDriftReportedNotCorrected checks drift policy Report: a field another manager changed
// with a plain update is reported with its path and that manager, and left as edited, run
// after run, with no write; an object deleted out of band is reported missing and not
// recreated, and stays in the inventory; without DriftOptions.Detect (a new revision) the
// same run corrects both.
func TestDriftReportedNotCorrected(t *testing.T) {
	h := newWatchHarness(t)
	opts := testOpts()
	objs := []*unstructured.Unstructured{webDeployment(h.ns, 1), configMap(h.ns, "settings", map[string]any{"k": "v"})}
	h.apply(opts, objs...)
	report := opts
	report.Drift = DriftOptions{Detect: true, Report: reportAll}
	// Without drift, detecting it costs nothing: the no-op run sends only the inventory read.
	if res := h.settle(report, 1, objs); len(res.Drift) != 0 {
		t.Errorf("drift reported before any edit: %+v", res.Drift)
	}

	h.edit("apps/v1", "Deployment", "web", func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, int64(3), "spec", "replicas")
		c, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		c[0].(map[string]any)["image"] = "registry.example/web:hotfix"
		_ = unstructured.SetNestedSlice(u.Object, c, "spec", "template", "spec", "containers")
	})
	want := []DriftedObject{{Object: deploymentID(h.ns, "web"), Fields: []DriftedField{
		{Path: "spec.replicas", Manager: "kubectl-edit"},
		{Path: "spec.template.spec.containers[name=web].image", Manager: "kubectl-edit"},
	}}}
	for run := range 2 { // a reported drift is judged again at every run, never remembered
		res := h.untilDrift(report, objs...)
		if diff := cmp.Diff(want, res.Drift); diff != "" {
			t.Errorf("run %d: drift (-want +got):\n%s", run, diff)
		}
		if w := h.rt.Writes(); len(w) != 0 {
			t.Errorf("run %d: Report mode wrote %v", run, w)
		}
		if got := actions(res.Changes)[deploymentID(h.ns, "web").String()]; got != ActionSkipped {
			t.Errorf("run %d: drifted object's action %s, want skipped", run, got)
		}
	}
	if r, _, _ := unstructured.NestedInt64(h.live("apps/v1", "Deployment", h.ns, "web").Object, "spec", "replicas"); r != 3 {
		t.Errorf("Report mode changed the edited replicas to %d", r)
	}

	if err := h.plain.Delete(h.ctx, h.liveCM("settings")); err != nil {
		t.Fatal(err)
	}
	var res *Result
	for range 30 {
		if res = h.untilDrift(report, objs...); len(res.Drift) == 2 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	wantMissing := DriftedObject{Object: idOf(objs[1]), Missing: true}
	if len(res.Drift) != 2 || !cmp.Equal(wantMissing, res.Drift[0]) { // ConfigMaps are applied first
		t.Fatalf("drift after the delete = %+v, want the ConfigMap reported missing", res.Drift)
	}
	if h.liveCM("settings") != nil {
		t.Error("Report mode recreated the ConfigMap deleted out of band")
	}
	if _, ok := h.inventory()[cmID(h.ns, "settings")]; !ok {
		t.Error("the ConfigMap reported missing left the inventory")
	}

	// A new revision: everything is applied. The hand-over of kubectl-edit's fields is a
	// JSON patch tested on the resourceVersion, which the Deployment controller may move
	// meanwhile: the run fails that object then, and a later run succeeds.
	var err error
	for range 10 {
		if res, err = h.eng.Apply(h.ctx, h.set(objs...), opts); err == nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if len(res.Drift) != 0 {
		t.Errorf("a run that does not detect drift reported %+v", res.Drift)
	}
	if r, _, _ := unstructured.NestedInt64(h.live("apps/v1", "Deployment", h.ns, "web").Object, "spec", "replicas"); r != 1 || h.liveCM("settings") == nil {
		t.Errorf("a full apply did not correct the drift: replicas %d, ConfigMap %v", r, h.liveCM("settings") != nil)
	}
}

// TestDriftCorrectedAndReported checks drift policy Correct with detection: the drift is
// corrected and reported as corrected, with the field and the manager that changed it; and
// a Report selector by kind reports the Deployment while it corrects the ConfigMap in the
// same run.
func TestDriftCorrectedAndReported(t *testing.T) {
	h := newHarness(t, Hooks{}) // the listed path: every run reads the objects
	opts := testOpts()
	objs := []*unstructured.Unstructured{webDeployment(h.ns, 1), configMap(h.ns, "settings", map[string]any{"k": "v"})}
	h.apply(opts, objs...)

	h.edit("v1", "ConfigMap", "settings", func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, "edited", "data", "k")
	})
	correct := opts
	correct.Drift = DriftOptions{Detect: true}
	res := h.apply(correct, objs...)
	want := []DriftedObject{{Object: idOf(objs[1]), Fields: []DriftedField{{Path: "data.k", Manager: "kubectl-edit"}}, Corrected: true}}
	if diff := cmp.Diff(want, res.Drift); diff != "" {
		t.Errorf("corrected drift (-want +got):\n%s", diff)
	}
	if v, _, _ := unstructured.NestedString(h.liveCM("settings").Object, "data", "k"); v != "v" {
		t.Errorf("Correct mode left data.k = %q", v)
	}
	if res = h.apply(correct, objs...); len(res.Drift) != 0 {
		t.Errorf("drift reported again after it was corrected: %+v", res.Drift)
	}

	h.edit("v1", "ConfigMap", "settings", func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, "edited", "data", "k")
	})
	h.edit("apps/v1", "Deployment", "web", func(u *unstructured.Unstructured) {
		u.SetLabels(map[string]string{"team": "b"})
	})
	mixed := opts
	mixed.Drift = DriftOptions{Detect: true, Report: func(id object.ObjMetadata) bool { return id.GroupKind.Kind == "Deployment" }}
	res = h.apply(mixed, objs...)
	want = []DriftedObject{ // in apply order: ConfigMaps are applied with the workloads
		{Object: idOf(objs[1]), Fields: []DriftedField{{Path: "data.k", Manager: "kubectl-edit"}}, Corrected: true},
		{Object: deploymentID(h.ns, "web"), Fields: []DriftedField{{Path: "metadata.labels.team", Manager: "kubectl-edit"}}},
	}
	if diff := cmp.Diff(want, res.Drift); diff != "" {
		t.Errorf("per-kind drift (-want +got):\n%s", diff)
	}
	if got := h.live("apps/v1", "Deployment", h.ns, "web").GetLabels()["team"]; got != "b" {
		t.Errorf("reported Deployment's label team = %q, want the edit b kept", got)
	}
	if v, _, _ := unstructured.NestedString(h.liveCM("settings").Object, "data", "k"); v != "v" {
		t.Errorf("corrected ConfigMap's data.k = %q", v)
	}
}

// TestDriftOf checks the fields a drift names and the managers it finds for them in
// managedFields: the newest other manager owning the field or below it, else one owning a
// whole map or list above it, never the run's own manager.
func TestDriftOf(t *testing.T) {
	fields := func(mf ...metav1.ManagedFieldsEntry) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{}}
		u.SetManagedFields(mf)
		return u
	}
	at := func(sec int64) *metav1.Time { t := metav1.Unix(sec, 0); return &t }
	entry := func(manager string, when int64, raw string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, Time: at(when),
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(raw)}}
	}
	containers := func(image string, more ...any) map[string]any {
		return map[string]any{"spec": map[string]any{"containers": append([]any{
			map[string]any{"name": "web", "image": image, "ports": []any{map[string]any{"containerPort": int64(80)}}}}, more...)}}
	}
	cases := []struct {
		name      string
		live, dry map[string]any
		desired   map[string]any // nil: dry
		managed   *unstructured.Unstructured
		want      []DriftedField
		more      int
	}{{
		name:    "scalar, newest owner",
		live:    map[string]any{"spec": map[string]any{"replicas": int64(3)}},
		dry:     map[string]any{"spec": map[string]any{"replicas": int64(1)}},
		managed: fields(entry("kubectl-scale", 1, `{"f:spec":{"f:replicas":{}}}`), entry("hpa", 2, `{"f:spec":{"f:replicas":{}}}`)),
		want:    []DriftedField{{Path: "spec.replicas", Manager: "hpa"}},
	}, {
		name: "through the scale subresource",
		live: map[string]any{"spec": map[string]any{"replicas": int64(5)}},
		dry:  map[string]any{"spec": map[string]any{"replicas": int64(1)}},
		managed: fields(func() metav1.ManagedFieldsEntry {
			e := entry("kubectl-scale", 1, `{"f:spec":{"f:replicas":{}}}`)
			e.Subresource = "scale"
			return e
		}(), func() metav1.ManagedFieldsEntry {
			e := entry("kube-controller-manager", 2, `{"f:status":{"f:replicas":{}}}`)
			e.Subresource = "status"
			return e
		}()),
		want: []DriftedField{{Path: "spec.replicas", Manager: "kubectl-scale"}},
	}, {
		name:    "keyed list element, own manager left out",
		live:    containers("web:2"),
		dry:     containers("web:1"),
		managed: fields(entry("kubectl-edit", 1, `{"f:spec":{"f:containers":{"k:{\"name\":\"web\"}":{"f:image":{}}}}}`), entry("converge", 3, `{"f:spec":{"f:containers":{}}}`)),
		want:    []DriftedField{{Path: "spec.containers[name=web].image", Manager: "kubectl-edit"}},
	}, {
		name:    "element removed, list positional below",
		live:    containers("web:1", map[string]any{"name": "debug", "image": "busybox"}),
		dry:     map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "web", "image": "web:1", "ports": []any{map[string]any{"containerPort": int64(81)}}}}}},
		desired: containers("web:1", map[string]any{"name": "debug", "image": "busybox:2"}),
		managed: fields(entry("kubectl-debug", 1, `{"f:spec":{"f:containers":{"k:{\"name\":\"debug\"}":{".":{},"f:image":{},"f:name":{}}}}}`)),
		want: []DriftedField{
			{Path: "spec.containers[name=web].ports[0].containerPort"},
			{Path: "spec.containers[name=debug]", Manager: "kubectl-debug"},
		},
	}, {
		name: "a field the desired object does not set: the server's change since the read",
		live: map[string]any{"metadata": map[string]any{"annotations": map[string]any{"owner": "x"}}, "spec": map[string]any{"replicas": int64(3)}},
		dry: map[string]any{"metadata": map[string]any{"annotations": map[string]any{"owner": "x", "deployment.kubernetes.io/revision": "2"}},
			"spec": map[string]any{"replicas": int64(1)}},
		desired: map[string]any{"metadata": map[string]any{"annotations": map[string]any{"owner": "x"}}, "spec": map[string]any{"replicas": int64(1)}},
		managed: fields(entry("kubectl-edit", 1, `{"f:spec":{"f:replicas":{}}}`)),
		want:    []DriftedField{{Path: "spec.replicas", Manager: "kubectl-edit"}},
	}, {
		name:    "removed label: no owner",
		live:    map[string]any{"metadata": map[string]any{"labels": map[string]any{}}},
		dry:     map[string]any{"metadata": map[string]any{"labels": map[string]any{"team": "a"}}},
		managed: fields(),
		want:    []DriftedField{{Path: "metadata.labels.team"}},
	}, {
		name:    "atomic map owned above",
		live:    map[string]any{"spec": map[string]any{"selector": map[string]any{"app": "x"}}},
		dry:     map[string]any{"spec": map[string]any{"selector": map[string]any{"app": "y"}}},
		managed: fields(entry("other", 1, `{"f:spec":{"f:selector":{}}}`)),
		want:    []DriftedField{{Path: "spec.selector.app", Manager: "other"}},
	}}
	many := map[string]any{}
	for i := range MaxDriftFields + 3 {
		many[string(rune('a'+i))] = int64(i)
	}
	cases = append(cases, struct {
		name      string
		live, dry map[string]any
		desired   map[string]any // nil: dry
		managed   *unstructured.Unstructured
		want      []DriftedField
		more      int
	}{name: "bounded", live: map[string]any{"data": many}, dry: map[string]any{"data": map[string]any{}}, desired: map[string]any{"data": many},
		managed: fields(), more: 3})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			desired := tc.desired
			if desired == nil {
				desired = tc.dry
			}
			got, more := driftOf(&unstructured.Unstructured{Object: desired}, &unstructured.Unstructured{Object: tc.live},
				&unstructured.Unstructured{Object: tc.dry}, tc.managed, "converge")
			if tc.name == "bounded" {
				if len(got) != MaxDriftFields || more != tc.more {
					t.Errorf("%d fields, %d more; want %d and %d", len(got), more, MaxDriftFields, tc.more)
				}
				return
			}
			if diff := cmp.Diff(tc.want, got); diff != "" || more != tc.more {
				t.Errorf("fields (-want +got):\n%s\nmore %d, want %d", diff, more, tc.more)
			}
		})
	}
}

// TestDriftSecretStringData checks drift of a Secret the source writes with stringData: the
// server stores it in data, so data.<k> changed out of band is drift of a field the source
// sets, reported as data.<k> with the manager that changed it.
func TestDriftSecretStringData(t *testing.T) {
	secret := func(data map[string]any) map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
			"metadata": map[string]any{"name": "creds", "namespace": "default"}, "data": data}
	}
	desired := secret(nil)
	delete(desired, "data")
	desired["stringData"] = map[string]any{"token": "good"}
	live := &unstructured.Unstructured{Object: secret(map[string]any{"token": "ZXZpbA=="})} // evil
	dry := &unstructured.Unstructured{Object: secret(map[string]any{"token": "Z29vZA=="})}  // good
	at := metav1.Now()
	live.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "kubectl-edit", Operation: metav1.ManagedFieldsOperationUpdate,
		APIVersion: "v1", Time: &at, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:data":{"f:token":{}}}`)}}})
	fields, more := driftOf(&unstructured.Unstructured{Object: desired}, live, dry, live, "converge")
	want := []DriftedField{{Path: "data.token", Manager: "kubectl-edit"}}
	if diff := cmp.Diff(want, fields); diff != "" || more != 0 {
		t.Errorf("fields (-want +got):\n%s\nmore %d", diff, more)
	}
	// A key only the server added to data (not in stringData) is still not the source's.
	dry.Object["data"].(map[string]any)["other"] = "eA=="
	if fields, _ := driftOf(&unstructured.Unstructured{Object: desired}, live, dry, live, "converge"); len(fields) != 1 {
		t.Errorf("fields %+v, want data.token alone", fields)
	}
}

// TestDriftRemovedFieldNamesNoManager checks that a field live no longer has (a label
// removed with `kubectl label cm web team-`) is reported with no manager, not with one that
// owns the map around it.
func TestDriftRemovedFieldNamesNoManager(t *testing.T) {
	mk := func(labels map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "web", "namespace": "default", "labels": labels},
			"data":     map[string]any{"k": "v"},
		}}
	}
	desired := mk(map[string]any{"team": "a", "app": "web"})
	dry := mk(map[string]any{"team": "a", "app": "web"})
	live := mk(map[string]any{"app": "web"})
	at := metav1.Now()
	live.SetManagedFields([]metav1.ManagedFieldsEntry{
		{Manager: "helm-controller", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &at,
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{".":{},"f:app":{}}}}`)}},
		{Manager: "converge", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "v1", Time: &at,
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:data":{"f:k":{}},"f:metadata":{"f:labels":{"f:app":{}}}}`)}},
	})
	fields, _ := driftOf(desired, live, dry, live, "converge")
	if len(fields) != 1 || fields[0].Path != "metadata.labels.team" {
		t.Fatalf("fields %+v, want metadata.labels.team", fields)
	}
	if fields[0].Manager != "" {
		t.Errorf("removed label attributed to manager %q", fields[0].Manager)
	}
}
