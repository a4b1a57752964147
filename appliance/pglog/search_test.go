package pglog

import (
	"errors"
	"slices"
	"testing"
)

// TestSearchAcrossDays: the search's filters and its range over an archived day and a live one, the
// newest Limit of the range kept; Scan gives every match oldest first and stops at its bound.
func TestSearchAcrossDays(t *testing.T) {
	e := setup(t)
	e.writeArchive("2026-11-23", dayLines("2026-11-23", 5)) // 10:00 .. 10:04
	e.appendLive("2026-11-24", dayLines("2026-11-24", 5))
	e.appendLive("2026-11-24", jl(ts("2026-11-24 11:00"), "ERROR", "bob", "Relation MISSING does not exist"))

	q := func(mod func(*Query)) []string {
		t.Helper()
		qq := Query{Limit: 100, Since: ts("2026-11-23 00:00")}
		mod(&qq)
		es, _ := mustRead(t, e.dirs, qq)
		return messages(es)
	}
	check := func(name string, got []string, want ...string) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Errorf("%s: got %q, want %q", name, got, want)
		}
	}
	check("a range across the two days", q(func(q *Query) { q.Since, q.Until = ts("2026-11-23 10:03"), ts("2026-11-24 10:01") }),
		"2026-11-23 #3", "2026-11-23 #4", "2026-11-24 #0", "2026-11-24 #1")
	check("the newest of a range in the archive", q(func(q *Query) { q.Until, q.Limit = ts("2026-11-23 10:02"), 2 }),
		"2026-11-23 #1", "2026-11-23 #2")
	check("text ignoring case", q(func(q *Query) { q.Text = "missing" }), "Relation MISSING does not exist")
	check("text in the archive", q(func(q *Query) { q.Text = "11-23 #4" }), "2026-11-23 #4")
	check("a user", q(func(q *Query) { q.User = "bob" }), "Relation MISSING does not exist")
	check("a user and another database", q(func(q *Query) { q.User, q.Database = "bob", "other" }))
	check("a database", q(func(q *Query) { q.Database, q.Until = "app", ts("2026-11-23 10:00") }), "2026-11-23 #0")
	check("no SQLSTATE on LOG lines", q(func(q *Query) { q.SQLState = "42P01" }))

	var got []string
	n, err := Scan(e.dirs, Query{Since: ts("2026-11-23 10:02"), Until: ts("2026-11-24 10:02")}, 4, func(x Entry) error {
		got = append(got, x.Message)
		return nil
	})
	if err != nil || n != 4 {
		t.Fatalf("scan: %d %v", n, err)
	}
	check("scan, bounded", got, "2026-11-23 #2", "2026-11-23 #3", "2026-11-23 #4", "2026-11-24 #0")
	got = nil
	if _, err := Scan(e.dirs, Query{Since: ts("2026-11-23 00:00"), Text: "does NOT"}, 100, func(x Entry) error {
		got = append(got, x.Message)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	check("scan, text", got, "Relation MISSING does not exist")
	stop := errors.New("stop")
	if n, err := Scan(e.dirs, Query{}, 100, func(Entry) error { return stop }); err != stop || n != 0 {
		t.Errorf("scan stops at fn's error: %d %v", n, err)
	}
}
