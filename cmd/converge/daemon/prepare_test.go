package daemon

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/status/v1alpha1"
)

func refBundle(rev string) *sources.Bundle {
	return &sources.Bundle{Revision: rev, Origins: []string{"cm.yaml:1"}, Objects: []*unstructured.Unstructured{{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "c"}, "data": map[string]any{"k": "${v}"}}}}}
}

// TestPrepareKeepsPerSync: a Sync's substitution is kept for its next reconcile and its
// redactor kept after a failed one; a Sync without postBuild keeps nothing.
func TestPrepareKeepsPerSync(t *testing.T) {
	r := &reconciler{states: newSyncStates()}
	ctx := context.Background()
	s := &v1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web"},
		Spec: v1alpha1.SyncSpec{PostBuild: &v1alpha1.PostBuild{Substitute: map[string]string{"v": "one"}, Strict: true}}}
	in := refBundle("main@sha1:1")
	first, err := r.prepare(ctx, s, in, nil)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := r.prepare(ctx, s, in, nil); err != nil || again.Objects[0] != first.Objects[0] {
		t.Errorf("the same objects and variables: want the kept result; got %v, %v", again.Objects[0] == first.Objects[0], err)
	}
	key := client.ObjectKeyFromObject(s)
	s.Spec.PostBuild.Substitute = map[string]string{"other": "x"} // strict: ${v} has no value now
	if _, err := r.prepare(ctx, s, in, []string{"helm-secret"}); err == nil {
		t.Fatal("strict with a missing variable succeeded")
	}
	if got := r.redact(s, "x helm-secret"); got != "x ***" {
		t.Errorf("the redactor of the failed reconcile was not kept: %q", got)
	}
	s.Spec.PostBuild = nil
	out, err := r.prepare(ctx, s, in, nil)
	var kept bool
	r.states.with(key, func(st *syncState) { kept = st.memo != nil || st.redactor != nil })
	if err != nil || out != in || kept {
		t.Errorf("without postBuild: want the bundle as it is and nothing kept; got %v, %v, kept %v", out == in, err, kept)
	}
}

// TestSubstituteBoundedByTheDaemonLimits: what substitution inserts is bounded by the
// daemon's --max-file-size (per object), as the error says. Were the bound the default
// 8 MiB whatever the flag, a 10,000-byte value would be substituted under a 1,000-byte
// --max-file-size.
func TestSubstituteBoundedByTheDaemonLimits(t *testing.T) {
	r := &reconciler{states: newSyncStates(), render: renderSettings{limits: sources.Limits{MaxFileSize: 1000}}}
	s := &v1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web"},
		Spec: v1alpha1.SyncSpec{PostBuild: &v1alpha1.PostBuild{Substitute: map[string]string{"v": strings.Repeat("x", 10000)}}}}
	_, err := r.prepare(context.Background(), s, refBundle("main@sha1:1"), nil)
	if want := "larger than 1000 bytes (raise the limit with --max-file-size)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want one saying %q", err, want)
	}
}
