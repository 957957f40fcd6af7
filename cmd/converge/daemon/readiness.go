package daemon

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// reasonProgressing is the Ready=Unknown (and Reconciling=True) reason of a Sync whose
// objects were applied and are not all Current yet.
const reasonProgressing = "Progressing"

// Readiness polls: a Sync whose objects are not Current yet is judged again after
// readinessPollMin, the delay growing with the time already waited (a fifth of it) up to
// readinessPollMax, and never past its deadline. No worker waits in between: a reconcile
// applies (a no-op once applied), reads each object once from the watch cache, and ends.
const (
	readinessPollMin = 2 * time.Second
	readinessPollMax = 30 * time.Second
)

// waitState is what a reconcile knows of the readiness wait of the revision it applied.
type waitState struct {
	// pending names the objects that are not Current, in apply order (engine.Describe).
	pending []string
	// details are the same objects with kstatus' status and message, for a timeout.
	details []string
	// since is when the wait of this generation and revision began (the Reconciling
	// condition's lastTransitionTime); zero when none is recorded: it begins now.
	since time.Time
	// expired says the Sync's status already reports this generation and revision's
	// deadline as passed (Ready=False HealthCheckFailed).
	expired bool
	now     time.Time
	timeout time.Duration // the Sync's spec.timeout, or the engine's default
	// held names the objects of later waves the engine did not apply yet and what they
	// wait for (engine.Result.Held); empty when every object was applied.
	held string
}

// waitVerdict is what to record and when to look again.
type waitVerdict struct {
	ready   metav1.ConditionStatus
	reason  string
	message string
	// poll is when to judge again while waiting (zero after the deadline: retry with
	// back-off, as any failure).
	poll time.Duration
}

// judgeWait decides, from plain values, the outcome of a reconcile whose objects are not
// all Current: Progressing until since+timeout (a stable message, so polls that find the
// same objects pending write nothing, I7), HealthCheckFailed from then on.
func judgeWait(w waitState) waitVerdict {
	since := w.since
	if since.IsZero() || since.After(w.now) {
		since = w.now
	}
	elapsed := w.now.Sub(since)
	held := ""
	if w.held != "" {
		held = "; " + w.held
	}
	if w.expired || elapsed >= w.timeout {
		return waitVerdict{ready: metav1.ConditionFalse, reason: reasonHealthCheck,
			message: fmt.Sprintf("%s not Current within spec.timeout (%s): %s%s",
				countObjects(len(w.details)), w.timeout, strings.Join(w.details, "; "), held)}
	}
	poll := min(max(readinessPollMin, elapsed/5), readinessPollMax, w.timeout-elapsed)
	return waitVerdict{ready: metav1.ConditionUnknown, reason: reasonProgressing, poll: poll,
		message: fmt.Sprintf("waiting for %s: %s%s", countObjects(len(w.pending)), listNames(w.pending, 10), held)}
}

// recheck is when to judge the readiness of s at revision again, as judgeWait said when it
// recorded the Sync Progressing: from the wait's start (waitOf; now when none is recorded)
// and the Sync's timeout. A wait whose deadline passed in between is judged again at once.
func recheck(s *v1alpha1.Sync, revision string, now time.Time) time.Duration {
	since, _ := waitOf(s, revision)
	j := judgeWait(waitState{since: since, now: now, timeout: applyOptions(s).Timeout})
	if j.poll <= 0 {
		return 100 * time.Millisecond
	}
	return j.poll
}

// listNames joins names, the first max of them and a count of the others.
func listNames(names []string, limit int) string {
	if len(names) <= limit {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:limit], ", "), len(names)-limit)
}

// waitOf reads, from the Sync's status, the wait of generation g at revision: since is
// the Reconciling condition's lastTransitionTime when it is about g and revision (the
// status writer starts it anew for another generation or revision), and expired says
// Ready is already HealthCheckFailed for them. Both survive a restart and a handover.
func waitOf(s *v1alpha1.Sync, revision string) (since time.Time, expired bool) {
	if s.Status.LastAttemptedRevision != revision {
		return time.Time{}, false
	}
	g := s.Generation
	if c := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReconciling); c != nil &&
		c.Status == metav1.ConditionTrue && c.Reason == reasonProgressing && c.ObservedGeneration == g {
		since = c.LastTransitionTime.Time
	}
	if c := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady); c != nil &&
		c.Status == metav1.ConditionFalse && c.Reason == reasonHealthCheck && c.ObservedGeneration == g {
		expired = true
	}
	return since, expired
}

// notCurrent splits health into the names of the objects that are not Current and the same
// with their status and message.
func notCurrent(health []engine.ObjectHealth) (names, details []string) {
	for _, h := range health {
		if h.Status == "Current" {
			continue
		}
		name := engine.Describe(h.Object)
		names = append(names, name)
		d := name + " " + h.Status
		if h.Message != "" {
			d += ": " + h.Message
		}
		details = append(details, d)
	}
	return names, details
}

// countObjects is "1 object" or "N objects".
func countObjects(n int) string {
	if n == 1 {
		return "1 object"
	}
	return fmt.Sprintf("%d objects", n)
}
