package postgres

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestRestorePointAcrossSegments: a restore point whose WAL record starts at the end of one segment file
// and ends in the next (after that one's long page header) is read back all the same: its time is the
// one PostgreSQL stamped, between the call's start and end. The WAL is filled with logical messages
// (pg_logical_emit_message) up to a few dozen bytes before a segment's end, so that the point's record
// (104 bytes) crosses it; a background record slipping in first only means another try.
func TestRestorePointAcrossSegments(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	inst := b.newInstance(t, "rpsegment", Settings{})
	conn := admin(t, inst)
	var segSz uint64
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.pg_size_bytes(current_setting('wal_segment_size'))").Scan(&segSz); err != nil {
		t.Fatal(err)
	}
	insert := func() uint64 {
		t.Helper()
		var lsn string
		if err := conn.QueryRow(ctx, "SELECT pg_catalog.pg_current_wal_insert_lsn()::text").Scan(&lsn); err != nil {
			t.Fatal(err)
		}
		n, err := parseLSN(lsn)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	emit := func(size uint64) {
		t.Helper()
		if _, err := conn.Exec(ctx, "SELECT pg_catalog.pg_logical_emit_message(false, 'p', repeat('x', $1::int))", int64(size)); err != nil {
			t.Fatal(err)
		}
	}
	const recordSize = 104 // MAXALIGN(24 + 2 + 72): the point's record, with its padding
	for attempt := 1; attempt <= 5; attempt++ {
		// Fill until what is left of the segment is between 32 bytes (the record's block header and time
		// fall before the boundary) and the record's size.
		var segEnd, rem uint64
		for {
			pos := insert()
			segEnd = (pos/segSz + 1) * segSz
			rem = segEnd - pos
			if rem >= 32 && rem < recordSize-6 {
				break
			}
			switch {
			case rem >= 1<<20:
				emit(1 << 19)
			case rem >= 400:
				emit(rem - rem/256 - 300) // page headers (24 bytes a page) and the record's own header
			default:
				emit(0) // a 56-byte record: from at least 98 bytes left, it leaves 42 or more
			}
		}
		before := time.Now()
		name := "crossing" + strings.Repeat("x", attempt)
		rp, err := CreateRestorePoint(ctx, conn, name)
		if err != nil {
			t.Fatalf("a restore point %d bytes before a segment's end: %v", rem, err)
		}
		after := time.Now()
		end, err := parseLSN(rp.LSN)
		if err != nil {
			t.Fatal(err)
		}
		if end <= segEnd || end >= segEnd+40+recordSize {
			t.Logf("attempt %d: the point's record ends at %s, not across the boundary at %X (another record came first)", attempt, rp.LSN, segEnd)
			continue
		}
		if rp.Time.Before(before.Add(-time.Second)) || rp.Time.After(after.Add(time.Second)) {
			t.Fatalf("the point's time %v, not between %v and %v", rp.Time, before, after)
		}
		return
	}
	t.Fatal("no attempt put the restore point's record across a segment boundary")
}
