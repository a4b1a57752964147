package pglog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"
)

// following is a Follow running in the background, its entries arriving on ch.
type following struct {
	ch     chan Entry
	done   chan error
	cancel context.CancelFunc
}

func startFollow(t *testing.T, d Dirs, after string, q Query) *following {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &following{ch: make(chan Entry, 10000), done: make(chan error, 1), cancel: cancel}
	go func() {
		f.done <- Follow(ctx, d, after, q, 2*time.Millisecond, func(e Entry) error {
			f.ch <- e
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-f.done
	})
	return f
}

// take waits for the next n entries (5 s at most).
func (f *following) take(t *testing.T, n int) []Entry {
	t.Helper()
	var out []Entry
	deadline := time.After(5 * time.Second)
	for len(out) < n {
		select {
		case e := <-f.ch:
			out = append(out, e)
		case err := <-f.done:
			t.Fatalf("Follow ended: %v (after %v)", err, messages(out))
		case <-deadline:
			t.Fatalf("%d entries of %d in 5 s: %v", len(out), n, messages(out))
		}
	}
	return out
}

func (f *following) expect(t *testing.T, want ...string) []Entry {
	t.Helper()
	got := f.take(t, len(want))
	if !slices.Equal(messages(got), want) {
		t.Fatalf("got %v, want %v", messages(got), want)
	}
	return got
}

func TestFollowRotationAndPartialLines(t *testing.T) {
	e := setup(t)
	e.appendLive("2026-11-24", dayLines("2026-11-24", 3))
	_, cur := mustRead(t, e.dirs, Query{Limit: 1})
	f := startFollow(t, e.dirs, cur, Query{})

	e.appendLive("2026-11-24", jl(ts("2026-11-24 11:00"), "LOG", "app", "a1")+jl(ts("2026-11-24 11:01"), "LOG", "app", "a2"))
	f.expect(t, "a1", "a2")

	// A complete line and the start of the next in one write: the start is not read until complete.
	b3 := jl(ts("2026-11-24 11:03"), "ERROR", "app", "a3 written in two parts")
	e.appendLive("2026-11-24", jl(ts("2026-11-24 11:02"), "LOG", "app", "a2b")+b3[:50])
	f.expect(t, "a2b")
	e.appendLive("2026-11-24", b3[50:]+jl(ts("2026-11-24 11:04"), "LOG", "app", "a4"))
	got := f.expect(t, "a3 written in two parts", "a4")
	if got[0].Severity != "error" {
		t.Errorf("%+v", got[0])
	}

	// Rotation: the next day's file appears; a last line still reaches the old one just before.
	e.appendLive("2026-11-24", jl(ts("2026-11-24 23:59"), "LOG", "app", "last of the 24th"))
	e.appendLive("2026-11-25", jl(ts("2026-11-25 00:00"), "LOG", "app", "b1"))
	f.expect(t, "last of the 24th", "b1")
	// The old day is compressed away while followed: nothing is lost or repeated.
	if c, _, err := Maintain(e.dirs, ts("2026-11-25 12:00"), dayLen, 30*dayLen); c != 1 || err != nil {
		t.Fatalf("maintain: %d %v", c, err)
	}
	e.appendLive("2026-11-25", jl(ts("2026-11-25 00:01"), "LOG", "app", "b2"))
	// A day with no file at all (the server was down), then the next.
	e.appendLive("2026-11-27", jl(ts("2026-11-27 08:00"), "LOG", "app", "c1"))
	got = f.expect(t, "b2", "c1")

	// The cursors Follow gives are those that Read gives for the same entries.
	all, _ := mustRead(t, e.dirs, Query{Limit: 500})
	if all[len(all)-1].Cursor != got[1].Cursor || all[len(all)-2].Cursor != got[0].Cursor {
		t.Errorf("cursors %s %s, Read gives %s %s", got[0].Cursor, got[1].Cursor, all[len(all)-2].Cursor, all[len(all)-1].Cursor)
	}
}

// With no cursor Follow starts at the current end: what was written before is not sent.
func TestFollowFromNow(t *testing.T) {
	e := setup(t)
	e.appendLive("2026-11-24", dayLines("2026-11-24", 5))
	f := startFollow(t, e.dirs, "", Query{})
	// Follow has started from the end once one of the ticks arrives; ticks written before that are
	// before its end, so the first one it sends can be any of them.
	deadline := time.Now().Add(5 * time.Second)
	var first Entry
	for i := 0; first.Message == ""; i++ {
		if time.Now().After(deadline) {
			t.Fatal("no tick arrived")
		}
		e.appendLive("2026-11-24", jl(ts("2026-11-24 12:00"), "LOG", "", fmt.Sprintf("tick %d", i)))
		select {
		case first = <-f.ch:
		case <-time.After(20 * time.Millisecond):
		}
	}
	var n int
	if _, err := fmt.Sscanf(first.Message, "tick %d", &n); err != nil {
		t.Fatalf("first entry %q: %v", first.Message, err)
	}
	e.appendLive("2026-11-24", jl(ts("2026-11-24 12:01"), "LOG", "", "after"))
	var rest []string
	for i := n + 1; ; i++ {
		got := f.take(t, 1)[0].Message
		rest = append(rest, got)
		if got == "after" {
			break
		}
		if got != fmt.Sprintf("tick %d", i) {
			t.Fatalf("after %q: %v", first.Message, rest)
		}
	}
}

func TestFollowBeforeAnyFile(t *testing.T) {
	e := setup(t)
	d := Dirs{Live: e.dirs.Live + "/not-yet"}
	// The cursor of "now" when there is no directory yet, taken before Follow starts so that the lines
	// written below are after it whenever Follow looks.
	_, now := mustRead(t, d, Query{Limit: 10})
	f := startFollow(t, d, now, Query{})
	if err := os.MkdirAll(d.Live, 0o700); err != nil {
		t.Fatal(err)
	}
	e2 := &env{t: t, dirs: d}
	e2.appendLive("2026-11-24", dayLines("2026-11-24", 3))
	f.expect(t, want("2026-11-24", 0, 3)...)
}

func TestFollowFromArchivedDay(t *testing.T) {
	e := threeDays(t)
	all, _ := mustRead(t, e.dirs, Query{Limit: 500})
	f := startFollow(t, e.dirs, all[7].Cursor, Query{}) // in the archived 22nd
	f.expect(t, messages(all[8:])...)
	e.appendLive("2026-11-24", jl(ts("2026-11-24 20:00"), "LOG", "", "new"))
	f.expect(t, "new")
}

func TestFollowFilters(t *testing.T) {
	e := setup(t)
	f := startFollow(t, e.dirs, zeroPos.String(), Query{
		Severities: map[string]bool{"error": true, "fatal": true}, ExcludeUsers: []string{"appliance_admin"},
		Since: ts("2030-01-01 00:00"), Limit: 1, // do not apply to Follow
	})
	t0 := ts("2026-11-24 10:00")
	e.appendLive("2026-11-24", jl(t0, "LOG", "app", "log")+jl(t0, "ERROR", "appliance_admin", "admin error")+
		jl(t0, "ERROR", "app", "e1")+jl(t0, "FATAL", "", "f1")+jl(t0, "ERROR", "app", "e2"))
	f.expect(t, "e1", "f1", "e2")
}

func TestFollowStops(t *testing.T) {
	e := threeDays(t)
	boom := errors.New("client gone")
	err := Follow(context.Background(), e.dirs, zeroPos.String(), Query{}, time.Millisecond, func(Entry) error { return boom })
	if !errors.Is(err, boom) {
		t.Errorf("fn's error: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Follow(ctx, e.dirs, "", Query{}, time.Millisecond, func(Entry) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	if err := Follow(context.Background(), e.dirs, "nope", Query{}, time.Millisecond, func(Entry) error { return nil }); !errors.Is(err, ErrBadCursor) {
		t.Errorf("bad cursor: %v", err)
	}
	// A cancel while it waits ends it.
	ctx, cancel = context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Follow(ctx, e.dirs, "", Query{}, time.Hour, func(Entry) error { return nil }) }()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled while waiting: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Follow did not end")
	}
}
