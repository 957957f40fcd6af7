package status

import (
	"context"
	"testing"
)

// TestWriteRecordsTheOwner checks status.owner names the replica that wrote the status, in
// the same patch as the outcome (one write, never an extra one); a no-op by the same owner
// stays write-free (I7); a handover costs the new owner one write; a writer without a name
// and an outcome of an older generation (I5) leave the owner alone.
func TestWriteRecordsTheOwner(t *testing.T) {
	c, ft, key := setup(t)
	bumpGeneration(t, c, key, 2)
	rev1, rev2 := "main@sha1:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "main@sha1:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	writers := map[string]*Writer{}
	writer := func(owner string) *Writer {
		if writers[owner] == nil {
			writers[owner] = &Writer{Live: c, Client: c, Owner: owner}
		}
		return writers[owner]
	}
	steps := []struct {
		name      string
		owner     string
		o         Outcome
		writes    int
		wantOwner string
		wantRev   string
	}{
		{"the first outcome", "converge-0", ready(2, rev1), 1, "converge-0", rev1},
		{"a no-op by the same owner", "converge-0", ready(2, rev1), 0, "converge-0", rev1},
		{"a handover: the new owner's no-op", "converge-1", ready(2, rev1), 1, "converge-1", rev1},
		{"the new owner's next no-op", "converge-1", ready(2, rev1), 0, "converge-1", rev1},
		{"a writer without a name", "", ready(2, rev1), 0, "converge-1", rev1},
		{"a new revision by another replica", "converge-0", ready(2, rev2), 1, "converge-0", rev2},
		{"an older generation's outcome", "converge-2", ready(1, rev1), 0, "converge-0", rev2},
	}
	for _, st := range steps {
		ft.Reset()
		if err := writer(st.owner).Write(context.Background(), key, st.o); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if n := ft.Mutating(); n != st.writes {
			t.Errorf("%s: %d writes, want %d: %v", st.name, n, st.writes, ft.Writes())
		}
		s := get(t, c, key)
		if s.Status.Owner != st.wantOwner || s.Status.LastAppliedRevision != st.wantRev {
			t.Errorf("%s: owner %q, lastAppliedRevision %q; want %q, %q", st.name, s.Status.Owner, s.Status.LastAppliedRevision, st.wantOwner, st.wantRev)
		}
	}
}
