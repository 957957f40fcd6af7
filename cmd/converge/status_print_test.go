package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// statusItems are Syncs in the states the table must tell apart: Ready, failing at a newer
// revision than the last applied, applying a newer one, never reconciled, a generation not
// observed yet, and a long message of several lines.
func statusItems(now time.Time) []v1alpha1.Sync {
	const revA, revB = "main@sha1:0123456789012345678901234567890123456789", "main@sha1:abcdefabcdefabcdefabcdefabcdefabcdefabcd"
	sync := func(ns, name, owner string, ready metav1.ConditionStatus, reason, msg, attempted string) v1alpha1.Sync {
		s := v1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Generation: 1,
			CreationTimestamp: metav1.NewTime(now.Add(-90 * time.Minute))}}
		if ready == "" {
			return s
		}
		s.Status = v1alpha1.SyncStatus{ObservedGeneration: 1, Owner: owner, LastAppliedRevision: revA, LastAttemptedRevision: attempted,
			Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: ready, Reason: reason, Message: msg}}}
		return s
	}
	long := "Deployment/team-a/api: " + strings.Repeat("not ready, ", 12) + "the end\nConfigMap/team-a/cfg: forbidden"
	moved := sync("team-b", "moved", "converge-7d9f8-x2k4p", metav1.ConditionTrue, "ReconciliationSucceeded", "Applied revision "+revA, revA)
	moved.Generation, moved.Spec.Suspend = 2, true
	return []v1alpha1.Sync{
		sync("team-a", "api", "converge-7d9f8-qq5rz", metav1.ConditionFalse, "HealthCheckFailed", long, revA),
		sync("team-a", "new", "", "", "", "", ""),
		sync("team-b", "web", "converge-7d9f8-x2k4p", metav1.ConditionFalse, "BuildFailed", "kustomization.yaml: unknown field \"resorces\"", revB),
		sync("team-b", "rolling", "converge-7d9f8-x2k4p", metav1.ConditionUnknown, "Progressing", "waiting for 1 object: Deployment/team-b/rolling", revB),
		moved,
	}
}

// TestStatusOutputs checks the table of `converge status` against golden files. A newer
// revision that fails (or is in progress) is named in MESSAGE, in full, with REVISION the
// last applied and REASON the Ready reason; the table cuts a message after 120 characters and
// its first line, -o wide prints it whole on one line and adds OWNER, -A adds NAMESPACE and
// OWNER ("<none>" for an empty cell), --no-headers drops the header.
func TestStatusOutputs(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		golden string
		view   statusView
	}{
		{"status-table.txt", statusView{}},
		{"status-all-namespaces.txt", statusView{AllNamespaces: true}},
		{"status-wide.txt", statusView{Wide: true}},
		{"status-no-headers.txt", statusView{NoHeaders: true}},
	} {
		tc.view.Now = now
		var out bytes.Buffer
		if err := printSyncs(&out, statusItems(now), tc.view); err != nil {
			t.Fatalf("%s: %v", tc.golden, err)
		}
		golden(t, tc.golden, "NS-unused", out.String())
	}
}

// TestStatusJSONIsKubectlList checks -o json and yaml of several Syncs print the List
// kubectl get prints (apiVersion v1, kind List, the objects as items, no managedFields), and
// of one named Sync the object alone.
func TestStatusJSONIsKubectlList(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	var items []unstructured.Unstructured
	for _, s := range statusItems(now)[2:4] {
		s.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("Sync"))
		s.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "converge"}}
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&s)
		if err != nil {
			t.Fatal(err)
		}
		items = append(items, unstructured.Unstructured{Object: obj})
	}
	for _, tc := range []struct {
		golden, format string
		single         bool
	}{
		{"status.json", "json", false},
		{"status.yaml", "yaml", false},
		{"status-one.yaml", "yaml", true},
	} {
		pf := genericclioptions.NewPrintFlags("").WithDefaultOutput(tc.format)
		printer, err := pf.ToPrinter()
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		p := &syncPrinter{out: &out, printer: printer, single: tc.single}
		list := items
		if tc.single {
			list = items[:1]
		}
		if err := p.printList(list); err != nil {
			t.Fatalf("%s: %v", tc.golden, err)
		}
		golden(t, tc.golden, "NS-unused", out.String())
	}
}

// TestExplainSyncs checks the one-line errors of a Sync list: a cluster that does not serve
// Syncs (the API server's 404 for the list) says to install the CRD; a refused permission
// says what to do, as `converge apply` does.
func TestExplainSyncs(t *testing.T) {
	gr := v1alpha1.GroupVersion.WithResource("syncs").GroupResource()
	for _, tc := range []struct {
		err  error
		want string
	}{
		{apierrors.NewNotFound(gr, ""), "list syncs in namespace apps: the cluster has no Sync API (the converge.dev CRD is not installed); install it with converge install"},
		{apierrors.NewForbidden(gr, "", errors.New("no")), "ask for an RBAC grant"},
	} {
		got := explainSyncs(tc.err, "list syncs "+where("apps")).Error()
		if !strings.Contains(got, tc.want) || strings.Contains(got, "\n") {
			t.Errorf("explainSyncs(%v) = %q; want one line with %q", tc.err, got, tc.want)
		}
	}
}

// TestSyncMessageNamesThePin: a Sync pinned by spec.rollback whose message does not name
// the pinned revision (the pin refused, or not applied yet) says so first in the table; a
// message that names it (Ready, RolledBack) is left as it is.
func TestSyncMessageNamesThePin(t *testing.T) {
	const rev = "main@sha1:1111111111111111111111111111111111111111"
	s := v1alpha1.Sync{Spec: v1alpha1.SyncSpec{Rollback: &v1alpha1.Rollback{Revision: rev}}}
	s.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: "RollbackRefused", Message: "not rolled back: prune refused"}}
	if got, want := syncMessage(s, false), "pinned to "+rev+" by spec.rollback: not rolled back: prune refused"; got != want {
		t.Errorf("refused pin: %q, want %q", got, want)
	}
	s.Status.Conditions[0].Status, s.Status.Conditions[0].Message = metav1.ConditionTrue, "Applied revision "+rev
	if got, want := syncMessage(s, false), "Applied revision "+rev; got != want {
		t.Errorf("applied pin: %q, want %q", got, want)
	}
}
