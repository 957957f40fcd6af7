package daemon

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/converge-dev/converge/cmd/converge/daemon/shard"
	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/status/v1alpha1"
)

func (e *engineSet) heldUsers() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var users []string
	for u := range e.byUser {
		users = append(users, u)
	}
	slices.Sort(users)
	return users
}

func saSync(ns, name, sa string) *v1alpha1.Sync {
	return &v1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1alpha1.SyncSpec{ServiceAccountName: sa}}
}

// TestEngineSetKeepsAnIdentityWhileASyncActsAsIt: the engine of an impersonated user is
// shared by the Syncs acting as it and dropped with the last of them (forget), or when the
// last one's serviceAccountName changes; the daemon's own engine (and its watch cache) is
// kept. Without it, the set kept one engine per user string ever seen, for the life of the
// process: it grew with every service account name a tenant wrote and every deleted Sync.
func TestEngineSetKeepsAnIdentityWhileASyncActsAsIt(t *testing.T) {
	cluster.Require(t, env)
	ctx := t.Context()
	states := newSyncStates()
	es := newEngineSet(ctx, env.Config, engine.Options{}, false, "deployer", states)
	x, y, z, w := saSync("a", "x", ""), saSync("a", "y", ""), saSync("a", "z", "b"), saSync("b", "w", "")
	engs := map[string]*engine.Engine{}
	for _, s := range []*v1alpha1.Sync{x, y, z, w} {
		eng, err := es.forSync(s)
		if err != nil {
			t.Fatal(err)
		}
		engs[s.Name] = eng
	}
	if engs["x"] != engs["y"] || engs["x"] == engs["w"] {
		t.Errorf("Syncs acting as one user must share its engine, others not")
	}
	sa := func(ns, name string) string { return "system:serviceaccount:" + ns + ":" + name }
	if diff := cmp.Diff([]string{sa("a", "b"), sa("a", "deployer"), sa("b", "deployer")}, es.heldUsers()); diff != "" {
		t.Errorf("users held (-want +got):\n%s", diff)
	}
	z.Spec.ServiceAccountName = "c"
	if _, err := es.forSync(z); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{sa("a", "c"), sa("a", "deployer"), sa("b", "deployer")}, es.heldUsers()); diff != "" {
		t.Errorf("after z's serviceAccountName changed, users held (-want +got):\n%s", diff)
	}
	states.forget(types.NamespacedName{Namespace: "a", Name: "x"})
	if diff := cmp.Diff([]string{sa("a", "c"), sa("a", "deployer"), sa("b", "deployer")}, es.heldUsers()); diff != "" {
		t.Errorf("y still acts as a:deployer; users held (-want +got):\n%s", diff)
	}
	for _, s := range []*v1alpha1.Sync{y, z, w} {
		states.forget(types.NamespacedName{Namespace: s.Namespace, Name: s.Name})
	}
	if got := es.heldUsers(); len(got) != 0 {
		t.Errorf("no Sync is left, users still held: %q", got)
	}

	ownStates := newSyncStates()
	own := newEngineSet(ctx, env.Config, engine.Options{}, false, "", ownStates)
	if _, err := own.forSync(x); err != nil {
		t.Fatal(err)
	}
	ownStates.forget(types.NamespacedName{Namespace: "a", Name: "x"})
	if diff := cmp.Diff([]string{""}, own.heldUsers()); diff != "" {
		t.Errorf("the daemon's own engine must stay (-want +got):\n%s", diff)
	}
}

// TestEngineSetConcurrentForget runs reconciles and forgets of Syncs sharing users at once
// (under -race): once every Sync is forgotten, no user is held, and a Sync that acts again
// gets a working engine.
func TestEngineSetConcurrentForget(t *testing.T) {
	cluster.Require(t, env)
	states := newSyncStates()
	es := newEngineSet(context.Background(), env.Config, engine.Options{}, false, "", states)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for round := range 20 {
				s := saSync("ns", fmt.Sprintf("s%d", i), fmt.Sprintf("sa%d", (i+round)%3))
				if _, err := es.forSync(s); err != nil {
					t.Error(err)
					return
				}
				if _, err := es.secret(t.Context(), s, "none"); err == nil {
					t.Error("a Secret nobody created was read")
				}
				if round%2 == 1 {
					states.forget(types.NamespacedName{Namespace: s.Namespace, Name: s.Name})
				}
			}
			states.forget(types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("s%d", i)})
		})
	}
	wg.Wait()
	if got := es.heldUsers(); len(got) != 0 {
		t.Errorf("every Sync is forgotten, users still held: %q", got)
	}
}

// TestShardEnginesFollowTheShards: with sharding on, Syncs acting as the daemon get their
// shard's engine (one per shard, shared by its Syncs), Syncs acting as a service account
// their user's, and a dropped shard's engine is not handed out again: the next holding of
// the shard gets a new one, with an empty cache and memo.
func TestShardEnginesFollowTheShards(t *testing.T) {
	cluster.Require(t, env)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	o := Options{Sharding: ShardingAuto, Shards: 4}
	es := newEngineSet(ctx, env.Config, engine.Options{}, true, "", newSyncStates())
	es.shards = newShardEngines(o.shardConfig())
	// Syncs uid-0, uid-1, ... until uid-0's shard has two and another shard one.
	first := shard.Of("uid-0", 4)
	byShard := map[int][]*v1alpha1.Sync{}
	for i := 0; len(byShard) < 2 || len(byShard[first]) < 2; i++ {
		s := saSync("ns", fmt.Sprintf("s%d", i), "")
		s.UID = types.UID(fmt.Sprint("uid-", i))
		byShard[shard.Of(s.UID, 4)] = append(byShard[shard.Of(s.UID, 4)], s)
	}
	engineOf := func(s *v1alpha1.Sync) *engine.Engine {
		t.Helper()
		e, err := es.forSync(s)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	shared := byShard[first]
	e0 := engineOf(shared[0])
	if engineOf(shared[1]) != e0 {
		t.Errorf("two Syncs of shard %d got different engines", first)
	}
	for i, syncs := range byShard {
		if i != first && engineOf(syncs[0]) == e0 {
			t.Errorf("Syncs of shards %d and %d share an engine", first, i)
		}
	}
	tenant := saSync("ns", "tenant", "deployer")
	tenant.UID = shared[0].UID
	if engineOf(tenant) == e0 {
		t.Error("a Sync acting as a service account got the daemon's shard engine")
	}
	es.dropShard(first)
	if engineOf(shared[0]) == e0 {
		t.Errorf("shard %d's engine was handed out again after the shard was dropped", first)
	}
}
