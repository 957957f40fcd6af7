package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/converge-dev/converge/engine"
)

// TestProgressLine checks what a person sees on a terminal: every update redraws the one
// line (carriage return, clear line, text) and clear erases it before the report.
func TestProgressLine(t *testing.T) {
	var buf bytes.Buffer
	l := &progressLine{w: &buf, now: time.Now} // interval 0: no throttle
	for _, p := range []engine.Progress{
		{Stage: engine.StageApply, Total: 1000},
		{Stage: engine.StageApply, Done: 123, Total: 1000},
		{Stage: engine.StagePrune, Done: 3, Total: 10},
		{Stage: engine.StageWait, Done: 40, Total: 100},
	} {
		l.update(p)
	}
	l.clear()
	l.clear() // nothing left to erase
	want := "\r\x1b[2Kapplying 0/1000" + "\r\x1b[2Kapplying 123/1000" + "\r\x1b[2Kpruning 3/10" +
		"\r\x1b[2Kwaiting for readiness 40/100" + "\r\x1b[2K"
	if diff := cmp.Diff(want, buf.String()); diff != "" {
		t.Errorf("progress line (-want +got):\n%s", diff)
	}
}

// TestProgressLineThrottle checks, on a clock that never moves, that updates within the
// interval are dropped while a new stage and the end of a stage are always drawn.
func TestProgressLineThrottle(t *testing.T) {
	var buf bytes.Buffer
	at := time.Unix(0, 0)
	l := &progressLine{w: &buf, interval: time.Hour, now: func() time.Time { return at }}
	for done := 0; done <= 5; done++ {
		l.update(engine.Progress{Stage: engine.StageApply, Done: done, Total: 5})
	}
	l.update(engine.Progress{Stage: engine.StagePrune, Total: 2})
	l.update(engine.Progress{Stage: engine.StagePrune, Done: 1, Total: 2})
	want := "\r\x1b[2Kapplying 0/5" + "\r\x1b[2Kapplying 5/5" + "\r\x1b[2Kpruning 0/2"
	if diff := cmp.Diff(want, buf.String()); diff != "" {
		t.Errorf("throttled progress line (-want +got):\n%s", diff)
	}
}

// TestProgressDisabled checks that nothing is drawn when progress is off: a nil line
// ignores updates and clears, and showProgress is false for anything but a terminal.
func TestProgressDisabled(t *testing.T) {
	var buf bytes.Buffer
	l := newProgressLine(&buf, false)
	l.update(engine.Progress{Stage: engine.StageApply, Done: 1, Total: 2})
	l.clear()
	if buf.Len() != 0 {
		t.Errorf("a disabled progress line wrote %q", buf.String())
	}
	file, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	for _, stderr := range []any{&buf, file, nil} {
		for _, output := range []string{"", "json", "yaml", "markdown"} {
			if showProgress(stderr, output) {
				t.Errorf("showProgress(%T, %q) = true, want false (not a terminal)", stderr, output)
			}
		}
	}
}
