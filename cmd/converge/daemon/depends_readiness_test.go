package daemon

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// dep is a Sync at generation gen whose status observed observed, with a Ready condition
// of status ready ("" for none) and message msg.
func dep(gen, observed int64, ready metav1.ConditionStatus, msg string) *v1alpha1.Sync {
	s := &v1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: "crds", UID: "u1", Generation: gen}}
	s.Status.ObservedGeneration = observed
	if ready != "" {
		s.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: ready, Reason: "R", Message: msg}}
	}
	return s
}

// TestNotReady is the readiness rule of a dependency: Ready=True for its current generation;
// a suspended one on its last Ready condition alone (as Flux), a deleting one never.
func TestNotReady(t *testing.T) {
	suspended := func(s *v1alpha1.Sync) *v1alpha1.Sync { s.Spec.Suspend = true; return s }
	deleting := func(s *v1alpha1.Sync) *v1alpha1.Sync {
		s.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
		return s
	}
	for _, tc := range []struct {
		name string
		s    *v1alpha1.Sync
		want string
	}{
		{"ready", dep(3, 3, metav1.ConditionTrue, "Applied revision x"), ""},
		{"no status yet", dep(1, 0, "", ""), "has not reconciled generation 1"},
		{"new generation", dep(3, 2, metav1.ConditionTrue, "Applied revision x"), "has not reconciled generation 3"},
		{"failed", dep(3, 3, metav1.ConditionFalse, "FetchFailed: 503"), "is not Ready: FetchFailed: 503"},
		{"unknown without message", dep(3, 3, metav1.ConditionUnknown, ""), "is not Ready"},
		{"suspended ready, generation bumped by the suspension", suspended(dep(4, 3, metav1.ConditionTrue, "")), ""},
		{"suspended not ready", suspended(dep(4, 3, metav1.ConditionFalse, "boom")), "is suspended and not Ready: boom"},
		{"being deleted", deleting(dep(3, 3, metav1.ConditionTrue, "")), "is being deleted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, notReady(tc.s)); diff != "" {
				t.Errorf("notReady (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDependencyPredicates: a dependency's status-only update that makes it Ready passes the
// dependents' watch although the primary watch (syncChanged) drops it, so a Sync's own
// status write never triggers itself while its dependents still hear about it; a status
// update that changes nothing a dependent reports passes neither.
func TestDependencyPredicates(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		old, new             *v1alpha1.Sync
		dependents, primary  bool
		deletingDependencies bool
	}{
		{"becomes ready", dep(3, 3, metav1.ConditionFalse, "x"), dep(3, 3, metav1.ConditionTrue, "y"), true, false, false},
		{"observes its generation", dep(3, 2, metav1.ConditionTrue, "x"), dep(3, 3, metav1.ConditionTrue, "x"), true, false, false},
		{"new message while ready", dep(3, 3, metav1.ConditionTrue, "rev 1"), dep(3, 3, metav1.ConditionTrue, "rev 2"), false, false, false},
		{"new message while not ready", dep(3, 3, metav1.ConditionFalse, "a"), dep(3, 3, metav1.ConditionFalse, "b"), true, false, false},
		{"new generation", dep(3, 3, metav1.ConditionTrue, ""), dep(4, 3, metav1.ConditionTrue, ""), true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}
			got := [3]bool{readinessChanged{}.Update(e), syncChanged{}.Update(e), dependentGone{}.Update(e)}
			want := [3]bool{tc.dependents, tc.primary, tc.deletingDependencies}
			if got != want {
				t.Errorf("readinessChanged, syncChanged, dependentGone = %v, want %v", got, want)
			}
		})
	}
}

// TestDependencyRetry: a waiting Sync looks again at its retry interval (30s unset), capped
// at its interval, never growing.
func TestDependencyRetry(t *testing.T) {
	s := &v1alpha1.Sync{Spec: v1alpha1.SyncSpec{Interval: metav1.Duration{Duration: 5 * time.Minute}}}
	if got := dependencyRetry(s); got != 30*time.Second {
		t.Errorf("unset retry interval: %s, want 30s", got)
	}
	s.Spec.RetryInterval = &metav1.Duration{Duration: time.Hour}
	if got := dependencyRetry(s); got != 5*time.Minute {
		t.Errorf("retry interval above the interval: %s, want 5m", got)
	}
}
