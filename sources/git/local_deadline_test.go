package git

import (
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestFetchLocalDeadline: a local fetch (file://) cut by its deadline mid-pack returns at
// the deadline with a DeadlineError, and does not wait for git upload-pack to finish.
func TestFetchLocalDeadline(t *testing.T) {
	r := newTestRepo(t)
	files := map[string]string{}
	for _, name := range []string{"a", "b", "c", "d", "e", "f"} {
		data := make([]byte, 7<<20)
		_, _ = rand.Read(data)
		files[name] = string(data)
	}
	r.commit("big", files)
	r.push()
	err := fetchWithin(t, NewFetcher(t.TempDir()), t.Context(), Repository{URL: "file://" + r.bare}, 200*time.Millisecond)
	var de *DeadlineError
	if !errors.As(err, &de) || !strings.Contains(err.Error(), "not finished within 200ms") {
		t.Fatalf("Fetch error %v, want a DeadlineError: not finished within 200ms", err)
	}
}
