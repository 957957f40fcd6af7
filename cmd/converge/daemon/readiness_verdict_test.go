package daemon

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// TestJudgeWait: Progressing with a growing poll until spec.timeout has passed since the wait
// began, never polling past the deadline; HealthCheckFailed from then on, and at once when
// the status already says so for this generation and revision.
func TestJudgeWait(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pending, details := []string{"Deployment a/web"}, []string{"Deployment a/web InProgress: not available"}
	waiting := "waiting for 1 object: Deployment a/web"
	failed := "1 object not Current within spec.timeout (1h0m0s): Deployment a/web InProgress: not available"
	for _, tc := range []struct {
		name    string
		since   time.Time
		expired bool
		now     time.Time
		timeout time.Duration
		want    waitVerdict
	}{
		{"first look", time.Time{}, false, t0, time.Hour, waitVerdict{metav1.ConditionUnknown, reasonProgressing, waiting, 2 * time.Second}},
		{"a few seconds in", t0, false, t0.Add(5 * time.Second), time.Hour, waitVerdict{metav1.ConditionUnknown, reasonProgressing, waiting, 2 * time.Second}},
		{"a minute in", t0, false, t0.Add(time.Minute), time.Hour, waitVerdict{metav1.ConditionUnknown, reasonProgressing, waiting, 12 * time.Second}},
		{"long in: capped", t0, false, t0.Add(30 * time.Minute), time.Hour, waitVerdict{metav1.ConditionUnknown, reasonProgressing, waiting, 30 * time.Second}},
		{"close to the deadline", t0, false, t0.Add(time.Hour - time.Second), time.Hour, waitVerdict{metav1.ConditionUnknown, reasonProgressing, waiting, time.Second}},
		{"at the deadline", t0, false, t0.Add(time.Hour), time.Hour, waitVerdict{metav1.ConditionFalse, reasonHealthCheck, failed, 0}},
		{"deadline recorded as passed", t0, true, t0.Add(time.Second), time.Hour, waitVerdict{metav1.ConditionFalse, reasonHealthCheck, failed, 0}},
		{"start in the future (clock skew)", t0.Add(time.Hour), false, t0, time.Hour, waitVerdict{metav1.ConditionUnknown, reasonProgressing, waiting, 2 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := judgeWait(waitState{pending: pending, details: details, since: tc.since, expired: tc.expired, now: tc.now, timeout: tc.timeout})
			if d := cmp.Diff(tc.want, got, cmp.AllowUnexported(waitVerdict{})); d != "" {
				t.Errorf("judgeWait (-want +got):\n%s", d)
			}
		})
	}
}

func TestListNames(t *testing.T) {
	names := []string{"a", "b", "c"}
	if got := listNames(names, 3); got != "a, b, c" {
		t.Errorf("listNames(3) = %q", got)
	}
	if got := listNames(names, 2); got != "a, b and 1 more" {
		t.Errorf("listNames(2) = %q", got)
	}
}

// TestRecheck: a Progressing Sync is judged again when judgeWait says (a fifth of the time
// waited, at least readinessPollMin, never past the deadline), and at once, not at the
// interval, when the deadline passed between the judgement and the requeue.
func TestRecheck(t *testing.T) {
	now := time.Unix(10000, 0)
	sync := func(waited time.Duration) *v1alpha1.Sync {
		s := &v1alpha1.Sync{}
		s.Generation = 3
		s.Spec.Timeout = &metav1.Duration{Duration: time.Minute}
		s.Status.LastAttemptedRevision = "main@sha1:1"
		s.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionReconciling, Status: metav1.ConditionTrue,
			Reason: reasonProgressing, ObservedGeneration: 3, LastTransitionTime: metav1.NewTime(now.Add(-waited))}}
		return s
	}
	for _, tc := range []struct {
		waited time.Duration
		want   time.Duration
	}{
		{0, readinessPollMin},
		{25 * time.Second, 5 * time.Second},
		{59 * time.Second, time.Second},
		{2 * time.Minute, 100 * time.Millisecond},
	} {
		if got := recheck(sync(tc.waited), "main@sha1:1", now); got != tc.want {
			t.Errorf("waited %s of 1m: recheck = %s, want %s", tc.waited, got, tc.want)
		}
	}
}

// TestJudgeWaitHeld: a run that stopped before a later wave says what it did not apply, in
// both the Progressing and the HealthCheckFailed message.
func TestJudgeWaitHeld(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	held := "ConfigMap a/late (wave 1) not applied: waiting for Deployment a/web (wave 0)"
	w := waitState{pending: []string{"Deployment a/web"}, details: []string{"Deployment a/web InProgress: not available"},
		since: t0, now: t0.Add(time.Second), timeout: time.Minute, held: held}
	if got := judgeWait(w).message; got != "waiting for 1 object: Deployment a/web; "+held {
		t.Errorf("Progressing message %q", got)
	}
	w.now = t0.Add(time.Minute)
	if got := judgeWait(w).message; got != "1 object not Current within spec.timeout (1m0s): Deployment a/web InProgress: not available; "+held {
		t.Errorf("HealthCheckFailed message %q", got)
	}
}
