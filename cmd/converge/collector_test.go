package main

import (
	"os"
	"runtime/debug"
	"testing"
)

// TestCollectorTarget: `converge run` sets its collector target to daemonGCPercent when GOGC
// is not set, and leaves the one GOGC gave the runtime alone.
func TestCollectorTarget(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	for _, c := range []struct {
		gogc    string // "": not set
		atStart int    // what the runtime took from the environment
		want    int
	}{{"", 100, daemonGCPercent}, {"100", 100, 100}, {"200", 200, 200}} {
		t.Run("GOGC="+c.gogc, func(t *testing.T) {
			t.Setenv("GOGC", c.gogc)
			if c.gogc == "" {
				os.Unsetenv("GOGC")
			}
			debug.SetGCPercent(c.atStart)
			setCollectorTarget()
			if got := debug.SetGCPercent(100); got != c.want {
				t.Errorf("collector target %d, want %d", got, c.want)
			}
		})
	}
}
