package status

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// tick is a clock that moves one minute per call, so each write's time differs.
func tick() func() time.Time {
	t := time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)
	return func() time.Time { t = t.Add(time.Minute); return t }
}

// brief is what a test compares of a history entry.
type brief struct {
	Revision, Digest, Ready, Reason string
	Generation                      int64
	Count                           int32
}

func briefs(h []v1alpha1.HistoryEntry) []brief {
	var out []brief
	for _, e := range h {
		out = append(out, brief{e.Revision, e.Digest, string(e.Ready), e.Reason, e.Generation, e.Count})
	}
	return out
}

func rev(i int) string { return fmt.Sprintf("main@sha1:%040d", i) }

// TestHistoryRecordsEachDistinctOutcome checks a new revision and a failure each add an
// entry, newest first, with the revision's digest, the summary, the duration and the times,
// in the one write the outcome makes anyway; an in-progress outcome adds none.
func TestHistoryRecordsEachDistinctOutcome(t *testing.T) {
	c, ft, key := setup(t)
	w := &Writer{Live: c, Client: c, Now: tick()}
	ctx := context.Background()
	first := ready(1, rev(1))
	first.Duration = 1500 * time.Millisecond
	progressing := Outcome{Generation: 1, Ready: metav1.ConditionUnknown, Reason: "Progressing", AttemptedRevision: rev(2),
		Summary: &v1alpha1.Summary{Configured: 1, NotReady: 1}}
	failed := Outcome{Generation: 1, Ready: metav1.ConditionFalse, Reason: "HealthCheckFailed", WaitOver: true,
		Message: strings.Repeat("Deployment web/api not ready; ", 40), AttemptedRevision: rev(2),
		Summary: &v1alpha1.Summary{NotReady: 1}}
	for _, o := range []Outcome{first, progressing, failed} {
		ft.Reset()
		if err := w.Write(ctx, key, o); err != nil {
			t.Fatal(err)
		}
		if n := ft.Mutating(); n != 1 {
			t.Errorf("%s: %d writes, want 1 (history rides on the outcome's own write)", o.Reason, n)
		}
	}
	h := get(t, c, key).Status.History
	want := []brief{
		{rev(2), "sha1:" + fmt.Sprintf("%040d", 2), "False", "HealthCheckFailed", 1, 1},
		{rev(1), "sha1:" + fmt.Sprintf("%040d", 1), "True", "Applied", 1, 1},
	}
	if diff := cmp.Diff(want, briefs(h)); diff != "" {
		t.Fatalf("history (-want +got):\n%s", diff)
	}
	if s := h[0].Summary; s == nil || s.Configured != 1 || s.NotReady != 1 {
		t.Errorf("the failure's summary = %+v, want the first apply of its revision (configured 1, notReady 1)", s)
	}
	if len(h[0].Message) > v1alpha1.MaxHistoryMessage || !strings.HasPrefix(h[0].Message, "Deployment web/api not ready") {
		t.Errorf("the failure's message is %d bytes (%q), want its start within %d", len(h[0].Message), h[0].Message, v1alpha1.MaxHistoryMessage)
	}
	if d := h[1].Duration; d == nil || d.Duration != 1500*time.Millisecond {
		t.Errorf("the first entry's duration = %v, want 1.5s", d)
	}
	if h[1].FirstSeen.IsZero() || !h[0].FirstSeen.After(h[1].FirstSeen.Time) {
		t.Errorf("first seen: newest %v, oldest %v; want the newest later", h[0].FirstSeen, h[1].FirstSeen)
	}
}

// TestHistoryOfARepeatedOutcomeWritesNothing is I7: the outcome of the newest entry again
// writes nothing (no count, no time bumped); when the status is written for another reason
// (a handled request), the same write counts it on the newest entry.
func TestHistoryOfARepeatedOutcomeWritesNothing(t *testing.T) {
	c, ft, key := setup(t)
	w := &Writer{Live: c, Client: c, Now: tick()}
	ctx := context.Background()
	if err := w.Write(ctx, key, ready(1, rev(1))); err != nil {
		t.Fatal(err)
	}
	before := get(t, c, key).Status.History
	ft.Reset()
	for i := 0; i < 3; i++ {
		if err := w.Write(ctx, key, ready(1, rev(1))); err != nil {
			t.Fatal(err)
		}
	}
	if n := ft.Mutating(); n != 0 {
		t.Errorf("the same outcome three times sent %d writes, want 0", n)
	}
	if diff := cmp.Diff(before, get(t, c, key).Status.History); diff != "" {
		t.Errorf("history moved without a write (-want +got):\n%s", diff)
	}

	again := ready(1, rev(1))
	again.HandledRequest = "2026-01-02T03:30:00Z"
	ft.Reset()
	if err := w.Write(ctx, key, again); err != nil {
		t.Fatal(err)
	}
	if n := ft.Mutating(); n != 1 {
		t.Errorf("a handled request sent %d writes, want 1", n)
	}
	h := get(t, c, key).Status.History
	if len(h) != 1 || h[0].Count != 2 || !h[0].LastSeen.After(h[0].FirstSeen.Time) {
		t.Errorf("history after the same outcome in a write = %+v, want one entry, count 2, last seen after first seen", h)
	}
}

// TestHistoryKeepsTheLastTen checks history is bounded: after twelve revisions it holds the
// newest ten, newest first.
func TestHistoryKeepsTheLastTen(t *testing.T) {
	c, _, key := setup(t)
	w := &Writer{Live: c, Client: c, Now: tick()}
	for i := 1; i <= 12; i++ {
		if err := w.Write(context.Background(), key, ready(1, rev(i))); err != nil {
			t.Fatal(err)
		}
	}
	h := get(t, c, key).Status.History
	var got []string
	for _, e := range h {
		got = append(got, e.Revision)
	}
	var want []string
	for i := 12; i > 2; i-- {
		want = append(want, rev(i))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("history revisions (-want +got):\n%s", diff)
	}
}

// TestHistoryOfARecreatedSyncStartsEmpty is I14: a Sync deleted and re-created under the same
// name starts with no history, and an outcome of the old one never lands in it.
func TestHistoryOfARecreatedSyncStartsEmpty(t *testing.T) {
	c, _, key := setup(t)
	ctx := context.Background()
	old := get(t, c, key)
	w := &Writer{Live: c, Client: c, Now: tick()}
	o := ready(old.Generation, rev(1))
	o.UID = old.UID
	if err := w.Write(ctx, key, o); err != nil {
		t.Fatal(err)
	}
	cur := recreate(t, c, key)
	if h := get(t, c, key).Status.History; len(h) != 0 {
		t.Fatalf("the re-created Sync has history %+v, want none", h)
	}
	o.AttemptedRevision, o.AppliedRevision = rev(2), rev(2)
	if err := w.Write(ctx, key, o); !errors.Is(err, ErrReplaced) {
		t.Fatalf("Write of the old Sync's outcome = %v, want ErrReplaced", err)
	}
	mine := ready(cur.Generation, rev(3))
	mine.UID = cur.UID
	if err := w.Write(ctx, key, mine); err != nil {
		t.Fatal(err)
	}
	if got := briefs(get(t, c, key).Status.History); len(got) != 1 || got[0].Revision != rev(3) {
		t.Errorf("the re-created Sync's history = %+v, want its own outcome only", got)
	}
}

func TestRevisionDigest(t *testing.T) {
	for rev, want := range map[string]string{
		"main@sha1:0123":          "sha1:0123",
		"v1.2.3@sha256:abcd":      "sha256:abcd",
		"sha256:abcd":             "sha256:abcd",
		"6.5.4":                   "",
		"":                        "",
		"refs/tags/a@b@sha1:ff00": "sha1:ff00",
	} {
		if got := revisionDigest(rev); got != want {
			t.Errorf("revisionDigest(%q) = %q, want %q", rev, got, want)
		}
	}
}

func TestTruncateKeepsRunesWhole(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"abcdefghij", 6, "abc…"},
		{"ééééé", 7, "éé…"},
	} {
		if got := truncate(tc.in, tc.n); got != tc.want || len(got) > tc.n {
			t.Errorf("truncate(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}
