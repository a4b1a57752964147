package pglog

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// threeDays writes 10 entries a day: 2026-11-22 archived (.gz only), 2026-11-23 and 2026-11-24 live.
func threeDays(t *testing.T) *env {
	e := setup(t)
	e.writeArchive("2026-11-22", dayLines("2026-11-22", 10))
	e.appendLive("2026-11-23", dayLines("2026-11-23", 10))
	e.appendLive("2026-11-24", dayLines("2026-11-24", 10))
	return e
}

func want(day string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%s #%d", day, i))
	}
	return out
}

func cat(lists ...[]string) []string { return slices.Concat(lists...) }

func TestReadNewest(t *testing.T) {
	e := threeDays(t)
	es, next := mustRead(t, e.dirs, Query{Limit: 5})
	if got, w := messages(es), want("2026-11-24", 5, 10); !slices.Equal(got, w) {
		t.Fatalf("got %v, want %v", got, w)
	}
	if next != es[4].Cursor {
		t.Errorf("next %s, want the last entry's cursor %s", next, es[4].Cursor)
	}
	// Across days and into the archive, oldest first.
	es, _ = mustRead(t, e.dirs, Query{Limit: 25})
	if got, w := messages(es), cat(want("2026-11-22", 5, 10), want("2026-11-23", 0, 10), want("2026-11-24", 0, 10)); !slices.Equal(got, w) {
		t.Fatalf("got %v,\nwant %v", got, w)
	}
	for i := 1; i < len(es); i++ {
		if es[i].Timestamp.Before(es[i-1].Timestamp) {
			t.Errorf("not oldest first at %d", i)
		}
	}
	// More than there are.
	es, _ = mustRead(t, e.dirs, Query{Limit: 500})
	if len(es) != 30 {
		t.Errorf("%d entries, want 30", len(es))
	}
}

func TestReadSince(t *testing.T) {
	e := threeDays(t)
	for _, c := range []struct {
		since time.Time
		limit int
		want  []string
	}{
		{ts("2026-11-23 10:07"), 100, cat(want("2026-11-23", 7, 10), want("2026-11-24", 0, 10))},
		{ts("2026-11-23 10:07"), 4, want("2026-11-24", 6, 10)}, // the newest, not the oldest
		{ts("2026-11-22 10:08"), 100, cat(want("2026-11-22", 8, 10), want("2026-11-23", 0, 10), want("2026-11-24", 0, 10))},
		{ts("2026-11-24 10:09"), 100, want("2026-11-24", 9, 10)}, // at or after: the exact time is in
		{ts("2026-11-24 10:08").Add(time.Second), 100, want("2026-11-24", 9, 10)},
		{ts("2026-11-25 00:00"), 100, nil},
	} {
		es, next := mustRead(t, e.dirs, Query{Since: c.since, Limit: c.limit})
		if got := messages(es); !slices.Equal(got, c.want) {
			t.Errorf("since %v limit %d: got %v, want %v", c.since, c.limit, got, c.want)
		}
		if len(es) == 0 && next == "" {
			t.Errorf("since %v: no cursor", c.since)
		}
	}
}

func TestReadFilters(t *testing.T) {
	e := setup(t)
	t0 := ts("2026-11-24 09:00")
	var b strings.Builder
	for i, l := range []struct{ sev, user string }{
		{"LOG", ""}, {"ERROR", "app"}, {"LOG", "appliance_admin"}, {"WARNING", "app"}, {"DEBUG", "app"},
		{"ERROR", "appliance_admin"}, {"FATAL", "other"}, {"NOTICE", "app"}, {"PANIC", ""}, {"ERROR", "app"},
	} {
		b.WriteString(jl(t0.Add(time.Duration(i)*time.Second), l.sev, l.user, fmt.Sprintf("m%d", i)))
	}
	e.appendLive("2026-11-24", b.String())
	sev := func(s string) map[string]bool {
		m, err := ParseSeverities(s)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, c := range []struct {
		q    Query
		want []string
	}{
		{Query{Limit: 100}, []string{"m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "m9"}},
		{Query{Limit: 100, Severities: sev("error")}, []string{"m1", "m5", "m9"}},
		{Query{Limit: 2, Severities: sev("error")}, []string{"m5", "m9"}},
		{Query{Limit: 100, Severities: sev("error,fatal,panic")}, []string{"m1", "m5", "m6", "m8", "m9"}},
		{Query{Limit: 100, Severities: sev("debug,notice")}, []string{"m4", "m7"}},
		{Query{Limit: 100, ExcludeUsers: []string{"appliance_admin"}}, []string{"m0", "m1", "m3", "m4", "m6", "m7", "m8", "m9"}},
		{Query{Limit: 100, ExcludeUsers: []string{"appliance_admin", "other"}, Severities: sev("error,fatal")}, []string{"m1", "m9"}},
		{Query{Limit: 100, Severities: sev("detail")}, nil},
	} {
		es, _ := mustRead(t, e.dirs, c.q)
		if got := messages(es); !slices.Equal(got, c.want) {
			t.Errorf("%+v: got %v, want %v", c.q, got, c.want)
		}
		// The same through paging forwards from the start.
		q := c.q
		q.After = zeroPos.String()
		q.Limit = 100
		es, _ = mustRead(t, e.dirs, q)
		if got := messages(es); c.q.Limit == 100 && !slices.Equal(got, c.want) {
			t.Errorf("%+v forwards: got %v, want %v", c.q, got, c.want)
		}
	}
}

func TestReadPagingForwards(t *testing.T) {
	e := threeDays(t)
	all, _ := mustRead(t, e.dirs, Query{Limit: 500})
	// From the first entry, 7 at a time: every later entry once, in order, across the archive and the
	// live files.
	var got []Entry
	cur := all[0].Cursor
	for range 20 {
		es, next := mustRead(t, e.dirs, Query{After: cur, Limit: 7})
		if len(es) > 7 {
			t.Fatalf("%d entries for limit 7", len(es))
		}
		if len(es) == 0 {
			if next != cur {
				t.Errorf("nothing new: next %s, want the given cursor %s", next, cur)
			}
			break
		}
		if next != es[len(es)-1].Cursor {
			t.Errorf("next %s, want the last entry's %s", next, es[len(es)-1].Cursor)
		}
		got = append(got, es...)
		cur = next
	}
	if !slices.Equal(messages(got), messages(all[1:])) {
		t.Fatalf("paged %v,\nwant %v", messages(got), messages(all[1:]))
	}
	for i := range got {
		if got[i].Cursor != all[i+1].Cursor {
			t.Errorf("entry %d: cursor %s forwards, %s backwards", i, got[i].Cursor, all[i+1].Cursor)
		}
	}
	// New lines after the end are found from the last cursor; Since is ignored with After.
	e.appendLive("2026-11-24", jl(ts("2026-11-24 23:00"), "LOG", "app", "late"))
	es, _ := mustRead(t, e.dirs, Query{After: cur, Since: ts("2030-01-01 00:00"), Limit: 10})
	if got := messages(es); !slices.Equal(got, []string{"late"}) {
		t.Errorf("after the end: %v", got)
	}
}

func TestReadEndCursor(t *testing.T) {
	e := setup(t)
	// No logs at all yet: the cursor still lets a tail start, and it gets the first lines.
	es, next := mustRead(t, e.dirs, Query{Limit: 10})
	if len(es) != 0 || next == "" {
		t.Fatalf("empty: %v %q", es, next)
	}
	es, _ = mustRead(t, Dirs{Live: e.dirs.Live + "/missing"}, Query{Limit: 10})
	if len(es) != 0 {
		t.Fatal(es)
	}
	e.appendLive("2026-11-23", dayLines("2026-11-23", 3))
	es, next = mustRead(t, e.dirs, Query{After: next, Limit: 10})
	if got := messages(es); !slices.Equal(got, want("2026-11-23", 0, 3)) {
		t.Fatalf("first lines: %v", got)
	}
	// Nothing matches: next names the current end, and only what comes after is read from it.
	es, next = mustRead(t, e.dirs, Query{Severities: map[string]bool{"panic": true}, Limit: 10})
	if len(es) != 0 {
		t.Fatal(es)
	}
	e.appendLive("2026-11-23", jl(ts("2026-11-23 12:00"), "PANIC", "", "boom"))
	e.appendLive("2026-11-24", jl(ts("2026-11-24 00:00"), "LOG", "", "new day"))
	es, _ = mustRead(t, e.dirs, Query{After: next, Limit: 10})
	if got := messages(es); !slices.Equal(got, []string{"boom", "new day"}) {
		t.Errorf("after the end cursor: %v", got)
	}
	// Paging with a filter that matches nothing moves on past what it read.
	_, next2 := mustRead(t, e.dirs, Query{After: next, Severities: map[string]bool{"fatal": true}, Limit: 10})
	if next2 == next {
		t.Errorf("next did not move past the lines read")
	}
	es, _ = mustRead(t, e.dirs, Query{After: next2, Limit: 10})
	if len(es) != 0 {
		t.Errorf("after the lines read: %v", messages(es))
	}
}

func TestReadPartialAndGarbageLines(t *testing.T) {
	e := setup(t)
	full := jl(ts("2026-11-24 10:02"), "ERROR", "app", "third")
	e.appendLive("2026-11-24",
		jl(ts("2026-11-24 10:00"), "LOG", "app", "first")+
			"not json at all\n"+
			`{"timestamp":"2026-11-24 10:00:30.000 UTC","error_severity":"LOG","message":"trunc`+"\n"+
			"\n"+
			jl(ts("2026-11-24 10:01"), "LOG", "app", "second")+
			full[:40]) // being written
	es, next := mustRead(t, e.dirs, Query{Limit: 10})
	if got := messages(es); !slices.Equal(got, []string{"first", "second"}) {
		t.Fatalf("got %v", got)
	}
	es2, next2 := mustRead(t, e.dirs, Query{After: next, Limit: 10})
	if len(es2) != 0 || next2 != next {
		t.Fatalf("the incomplete line was read: %v %s", es2, next2)
	}
	e.appendLive("2026-11-24", full[40:])
	es, _ = mustRead(t, e.dirs, Query{After: next, Limit: 10})
	if got := messages(es); !slices.Equal(got, []string{"third"}) || es[0].Severity != "error" {
		t.Fatalf("completed line: %+v", es)
	}
	// A file that is nothing but an incomplete line.
	e2 := setup(t)
	e2.appendLive("2026-11-24", full[:40])
	es, next = mustRead(t, e2.dirs, Query{Limit: 10})
	if len(es) != 0 {
		t.Fatal(es)
	}
	e2.appendLive("2026-11-24", full[40:])
	es, _ = mustRead(t, e2.dirs, Query{After: next, Limit: 10})
	if got := messages(es); !slices.Equal(got, []string{"third"}) {
		t.Fatalf("got %v", got)
	}
}

// Lines longer than a backward read's chunk, and chunk edges falling anywhere.
func TestReadLongLines(t *testing.T) {
	e := setup(t)
	var b strings.Builder
	var wantMsgs []string
	for i := range 40 {
		msg := fmt.Sprintf("m%d %s", i, strings.Repeat("x", (i*7919)%(3*chunkSize)))
		wantMsgs = append(wantMsgs, msg)
		b.WriteString(jl(ts("2026-11-24 10:00").Add(time.Duration(i)*time.Second), "LOG", "", msg))
	}
	e.appendLive("2026-11-24", b.String())
	es, _ := mustRead(t, e.dirs, Query{Limit: 500})
	if !slices.Equal(messages(es), wantMsgs) {
		t.Fatalf("backwards: %d entries", len(es))
	}
	es, _ = mustRead(t, e.dirs, Query{After: zeroPos.String(), Limit: 500})
	if !slices.Equal(messages(es), wantMsgs) {
		t.Fatalf("forwards: %d entries", len(es))
	}
}

func TestMalformedCursor(t *testing.T) {
	e := threeDays(t)
	for _, c := range []string{
		"garbage", "20261124", "20261124.", ".12", "20261124.-1", "20261124.1.2", "2026112.12", "202611244.12",
		"20261131.0", "20261324.0", "00000000.0", "20261124.99999999999999999999", "20261124.1x", "２０２６１１２４.1",
		"20261124 .1", "%32%30",
	} {
		_, _, err := Read(e.dirs, Query{After: c, Limit: 10})
		if !errors.Is(err, ErrBadCursor) {
			t.Errorf("Read after %q: %v, want ErrBadCursor", c, err)
		}
	}
}

func TestCursorFormat(t *testing.T) {
	e := threeDays(t)
	es, _ := mustRead(t, e.dirs, Query{Limit: 500})
	for _, x := range es {
		for _, c := range x.Cursor {
			if !(c >= '0' && c <= '9' || c == '.') {
				t.Fatalf("cursor %q is not URL-safe", x.Cursor)
			}
		}
		if p, err := parseCursor(x.Cursor); err != nil || p.String() != x.Cursor {
			t.Fatalf("cursor %q: %v", x.Cursor, err)
		}
	}
}

// A cursor whose day has been deleted resumes from the oldest day still kept.
func TestCursorOfPrunedDay(t *testing.T) {
	e := threeDays(t)
	es, _ := mustRead(t, e.dirs, Query{Limit: 500})
	in22, in23 := es[3].Cursor, es[13].Cursor
	if err := os.Remove(e.archivePath("2026-11-22")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(e.livePath("2026-11-23")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{in22, in23} {
		got, _ := mustRead(t, e.dirs, Query{After: c, Limit: 3})
		if m := messages(got); !slices.Equal(m, want("2026-11-24", 0, 3)) {
			t.Errorf("after %s: %v", c, m)
		}
	}
}

// The same day in both places (compressed, the live file not yet removed) is read once.
func TestReadDayInBothPlaces(t *testing.T) {
	e := threeDays(t)
	e.writeArchive("2026-11-23", dayLines("2026-11-23", 10))
	es, _ := mustRead(t, e.dirs, Query{Limit: 500})
	if len(es) != 30 {
		t.Errorf("%d entries, want 30", len(es))
	}
	es, _ = mustRead(t, e.dirs, Query{After: zeroPos.String(), Limit: 500})
	if len(es) != 30 {
		t.Errorf("forwards: %d entries, want 30", len(es))
	}
}

// A damaged archive hides its own day only.
func TestReadDamagedArchive(t *testing.T) {
	e := threeDays(t)
	os.WriteFile(e.archivePath("2026-11-21"), []byte("not gzip"), 0o600)
	full := e.archivePath("2026-11-20")
	e.writeArchive("2026-11-20", dayLines("2026-11-20", 10))
	b, _ := os.ReadFile(full)
	os.WriteFile(full, b[:len(b)/2], 0o600) // truncated: its first lines can still be read
	es, _ := mustRead(t, e.dirs, Query{Limit: 500})
	if len(es) < 30 || len(es) >= 40 || !slices.Equal(messages(es[len(es)-30:]), cat(want("2026-11-22", 0, 10), want("2026-11-23", 0, 10), want("2026-11-24", 0, 10))) {
		t.Errorf("backwards: %v", messages(es))
	}
	fwd, _ := mustRead(t, e.dirs, Query{After: zeroPos.String(), Limit: 500})
	if !slices.Equal(messages(fwd), messages(es)) {
		t.Errorf("forwards %v,\nbackwards %v", messages(fwd), messages(es))
	}
}
