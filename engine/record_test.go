package engine

import (
	"testing"

	"github.com/converge-dev/converge/inventory"
)

// TestRecordChanges: record.changes says what apply followed by Equal says, without the copy.
func TestRecordChanges(t *testing.T) {
	x, y := inventory.Entry{Object: idOf(configMap("a", "x", nil)), UID: "1"}, inventory.Entry{Object: idOf(configMap("a", "y", nil)), UID: "2"}
	noUID := func(e inventory.Entry) inventory.Entry { e.UID = ""; return e }
	otherUID := func(e inventory.Entry) inventory.Entry { e.UID = "9"; return e }
	tests := []struct {
		name    string
		stored  []inventory.Entry
		tracked []inventory.Entry
		untrack []inventory.Entry
	}{
		{name: "nothing"},
		{name: "the same", stored: []inventory.Entry{x, y}, tracked: []inventory.Entry{x, y}},
		{name: "a write-ahead entry", stored: []inventory.Entry{x}, tracked: []inventory.Entry{noUID(x)}},
		{name: "a new UID", stored: []inventory.Entry{x}, tracked: []inventory.Entry{otherUID(x)}},
		{name: "a new object", stored: []inventory.Entry{x}, tracked: []inventory.Entry{x, y}},
		{name: "a pruned object", stored: []inventory.Entry{x, y}, tracked: []inventory.Entry{x}, untrack: []inventory.Entry{y}},
		{name: "an untracked object not stored", stored: []inventory.Entry{x}, tracked: []inventory.Entry{x}, untrack: []inventory.Entry{y}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &record{tracked: tt.tracked}
			for _, e := range tt.untrack {
				rec.untrack = append(rec.untrack, e.Object)
			}
			stored := inventory.New(tt.stored...)
			want := !rec.apply(stored).Equal(stored)
			if got := rec.changes(stored); got != want {
				t.Errorf("changes = %v, apply+Equal says %v", got, want)
			}
		})
	}
}
