package studio

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/theappliance/appliance/store"
)

// TestCapText: a text over n characters keeps n of them, the last one "…", cut on a character boundary.
func TestCapText(t *testing.T) {
	if got := capText("héllo", 5); got != "héllo" {
		t.Errorf("a text of n characters: %q", got)
	}
	got := capText(strings.Repeat("é", 10), 4)
	if got != "ééé…" || !utf8.ValidString(got) {
		t.Errorf("capped: %q", got)
	}
}

// TestMaskHistory: an entry with a password in clear is masked once, and then left as it is.
func TestMaskHistory(t *testing.T) {
	h := &store.SQLHistoryEntry{Query: "ALTER ROLE app PASSWORD 'hunter2-secret'"}
	if !maskHistory(h) || strings.Contains(h.Query, "hunter2-secret") {
		t.Fatalf("not masked: %q", h.Query)
	}
	if maskHistory(h) {
		t.Errorf("a masked entry changed again: %q", h.Query)
	}
}

// TestAIPeriod: the calendar month (UTC) holding the time.
func TestAIPeriod(t *testing.T) {
	start, end := aiPeriod(time.Date(2026, 12, 31, 23, 59, 0, 0, time.UTC))
	if !start.Equal(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)) || !end.Equal(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("period %v – %v", start, end)
	}
}
