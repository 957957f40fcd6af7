package main

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/converge-dev/converge/engine"
)

// progressInterval is the least time between two redraws of the progress line: ten a
// second is smooth to read and costs nothing next to the API calls it reports.
const progressInterval = 100 * time.Millisecond

// clearLine returns the cursor to the start of the line and erases it (ANSI EL2).
const clearLine = "\r\x1b[2K"

// progressLine draws an Apply's engine.Progress as one self-overwriting line, for a person
// watching a terminal: "applying 123/1000", "pruning 3/10", "waiting for readiness 40/100".
// A nil *progressLine draws nothing, so callers need not check whether progress is shown.
type progressLine struct {
	w        io.Writer
	interval time.Duration    // least time between redraws; 0 draws every update
	now      func() time.Time // the clock, for the throttle

	mu    sync.Mutex
	last  time.Time    // when the line was last drawn
	stage engine.Stage // the stage last drawn
	shown bool         // a line is on the screen and must be erased
}

// newProgressLine returns a progressLine drawing on w at most every progressInterval, or
// nil when show is false.
func newProgressLine(w io.Writer, show bool) *progressLine {
	if !show {
		return nil
	}
	return &progressLine{w: w, interval: progressInterval, now: time.Now}
}

// showProgress reports whether "converge apply -o output" draws progress on stderr: only
// for a person (stderr is a terminal, not a CI log or a pipe) and never next to a report
// for machines (json, yaml), whose readers may capture both streams.
func showProgress(stderr any, output string) bool {
	return (output == "" || output == "markdown") && isTerminal(stderr)
}

// update draws p unless the line was drawn less than interval ago. A new stage and the
// end of a stage are always drawn, so the line never lingers on a stale count.
func (l *progressLine) update(p engine.Progress) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if l.shown && p.Stage == l.stage && p.Done < p.Total && now.Sub(l.last) < l.interval {
		return
	}
	l.last, l.stage, l.shown = now, p.Stage, true
	fmt.Fprintf(l.w, "%s%s %d/%d", clearLine, stageVerb(p.Stage), p.Done, p.Total)
}

// clear erases the line, if one is shown, so that what is printed next starts clean.
func (l *progressLine) clear() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.shown {
		_, _ = io.WriteString(l.w, clearLine)
		l.shown = false
	}
}

// stageVerb is how the progress line names a stage.
func stageVerb(s engine.Stage) string {
	switch s {
	case engine.StageApply:
		return "applying"
	case engine.StagePrune:
		return "pruning"
	case engine.StageWait:
		return "waiting for readiness"
	}
	return string(s)
}
