package e2e

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/converge-dev/converge/e2e/fault"
)

// The two-replica fault sweep: `make test-faults-daemon SEEDS=200` (or SEED=n to
// replay one). Each seed runs two sharded replicas of eight Syncs through rounds in which a
// commit is published and one replica, picked at random, is killed with SIGKILL (and a new
// one started, as a Deployment would), paused with SIGSTOP for a random time around its
// renew deadline (and replaced when it exits, fenced), or has its API requests fail at
// random for a while. After every round every Sync must become Ready at the round's commit
// with the commit's data; all along, one checker per Sync checks I1, I2, I5 and I11, and no
// Sync may be written by two replicas at once. It skips without CONVERGE_FAULT_SEEDS /
// CONVERGE_FAULT_SEED, as engine's TestRandomFaults.

// sweepRounds is how many rounds of a commit and a fault each seed runs.
const sweepRounds = 3

// TestBinaryShardsRandomFaults is the two-replica sweep.
func TestBinaryShardsRandomFaults(t *testing.T) {
	seeds, err := fault.Seeds()
	if err != nil {
		t.Fatal(err)
	}
	if len(seeds) == 0 {
		t.Skip("set CONVERGE_FAULT_SEEDS=N or CONVERGE_FAULT_SEED=n (make test-faults-daemon)")
	}
	var mu sync.Mutex
	actions := map[string]int{}
	failed := 0
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			var done []string
			defer func() { // also after a t.Fatal of the seed
				mu.Lock()
				defer mu.Unlock()
				for _, a := range done {
					actions[a]++
				}
				if t.Failed() {
					failed++
					t.Logf("replay: make test-faults-daemon SEED=%d", seed)
				}
			}()
			runDaemonSweep(t, seed, &done)
		})
	}
	names := make([]string, 0, len(actions))
	for a := range actions {
		names = append(names, a)
	}
	sort.Strings(names)
	var b strings.Builder
	fmt.Fprintf(&b, "\n%d seeds, %d failed; faults:", len(seeds), failed)
	for _, a := range names {
		fmt.Fprintf(&b, " %s×%d", a, actions[a])
	}
	fmt.Println(b.String())
}

// runDaemonSweep runs one seed, appending the faults it injects to done, one word each.
func runDaemonSweep(t *testing.T, seed uint64, done *[]string) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	f := newFleet(t)
	rev := f.publish("1")
	f.start("replica-a")
	f.start("replica-b")
	f.waitSpread()
	f.createSyncs()
	f.waitReady(rev)
	for round := 2; round < 2+sweepRounds; round++ {
		live := f.live()
		victim := live[r.IntN(len(live))]
		version := strconv.Itoa(round)
		early := r.IntN(2) == 0 // the commit before the fault, or during it
		if early {
			rev = f.publish(version)
		}
		// The new replica of a Deployment: a new name (replica-a → replica-a-3).
		successor := fmt.Sprintf("replica-%c-%d", victim.name[len("replica-")], round)
		switch r.IntN(3) {
		case 0:
			*done = append(*done, "kill")
			t.Logf("round %d: %s on %s (commit before the fault: %v)", round, "kill", victim.name, early)
			if err := victim.proc.Kill(); err != nil {
				t.Fatal(err)
			}
			victim.gone = true
			if !early {
				rev = f.publish(version)
			}
			sleepRandom(r, 3*time.Second)
			f.start(successor)
		case 1:
			pause := time.Second + time.Duration(r.Int64N(int64(2*fleetLease)))
			*done = append(*done, "pause")
			t.Logf("round %d: %s on %s (commit before the fault: %v)", round, "pause", victim.name, early)
			if err := victim.proc.Pause(); err != nil {
				t.Fatal(err)
			}
			if !early {
				rev = f.publish(version)
			}
			time.Sleep(pause) // the fault's length, not a timing assertion
			if err := victim.proc.Resume(); err != nil {
				t.Fatal(err)
			}
			// A pause past the renew deadline fences the replica for sure (its clock saw a
			// gap at least that long): wait for its exit as long as a graceful stop may take
			// on a loaded machine. A shorter one may or may not have: a short wait.
			exitWait := fleetLease
			if pause > fleetRenew {
				exitWait = 45 * time.Second
			}
			select {
			case <-victim.proc.Done():
			case <-time.After(exitWait):
			}
			select {
			case <-victim.proc.Done():
				t.Logf("round %d: %s paused %s, exited after resuming", round, victim.name, pause.Round(time.Millisecond))
				victim.gone = true
				f.start(successor)
			default:
				t.Logf("round %d: %s paused %s, still running", round, victim.name, pause.Round(time.Millisecond))
			}
		default:
			*done = append(*done, "api-errors")
			t.Logf("round %d: %s on %s (commit before the fault: %v)", round, "api-errors", victim.name, early)
			window := 2*time.Second + time.Duration(r.Int64N(int64(2*fleetLease)))
			victim.proxy.SetRules(
				fault.Rule{Status: http.StatusServiceUnavailable, Probability: 0.2 + 0.3*r.Float64(), For: window},
				fault.Rule{Status: http.StatusTooManyRequests, Probability: 0.2, For: window},
				fault.Rule{Latency: 500 * time.Millisecond, Probability: 0.3, For: window},
			)
			if !early {
				rev = f.publish(version)
			}
			time.Sleep(window)
			victim.proxy.SetRules()
		}
		f.waitReady(rev)
		f.checkVersion(version)
	}
	f.waitSpread()
	f.checkOneWriter()
	f.stopCheckers()
}

// sleepRandom sleeps up to max, at random.
func sleepRandom(r *rand.Rand, max time.Duration) {
	time.Sleep(time.Duration(r.Int64N(int64(max))))
}
