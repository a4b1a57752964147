package pgstat

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// Archiver is a server's WAL archiving as pg_stat_archiver tells it, with how much WAL waits for it.
type Archiver struct {
	ArchivedWAL string     // the last file archived ("" when none since the statistics began)
	ArchivedAt  *time.Time // when
	FailedWAL   string     // the last file whose archive_command failed
	FailedAt    *time.Time // when
	FailedCount int64
	// PendingBytes is the WAL written past the end of the last archived segment: what a loss of the disk
	// now would lose of this server (0 in recovery, or when no segment was archived yet and none failed).
	// It includes the segment being written, which is archived once it is full.
	PendingBytes int64
}

// Failing reports whether the archiver's last attempt failed (a failure newer than the last success).
func (a *Archiver) Failing() bool {
	return a.FailedAt != nil && (a.ArchivedAt == nil || a.FailedAt.After(*a.ArchivedAt))
}

// archiverSQL: the current LSN as bytes since 0/0 (NULL in recovery, where pg_current_wal_lsn fails) and
// the segment size, from which PendingBytes is computed.
const archiverSQL = `SELECT a.last_archived_wal, a.last_archived_time, a.last_failed_wal, a.last_failed_time, a.failed_count,
  CASE WHEN pg_is_in_recovery() THEN NULL ELSE pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint END,
  (SELECT setting::bigint FROM pg_settings WHERE name = 'wal_segment_size')
FROM pg_stat_archiver a`

// ReadArchiver reads the archiver's state of the server admin is connected to.
func ReadArchiver(ctx context.Context, admin *pgx.Conn) (*Archiver, error) {
	var a Archiver
	var archived, failed *string
	var lsn *int64
	var segSize int64
	if err := queryAdminRow(ctx, admin, archiverSQL, nil, &archived, &a.ArchivedAt, &failed, &a.FailedAt, &a.FailedCount, &lsn, &segSize); err != nil {
		return nil, fmt.Errorf("read pg_stat_archiver: %w", err)
	}
	if archived != nil {
		a.ArchivedWAL = *archived
	}
	if failed != nil {
		a.FailedWAL = *failed
	}
	for _, t := range []*time.Time{a.ArchivedAt, a.FailedAt} {
		if t != nil {
			*t = t.UTC()
		}
	}
	if lsn != nil {
		a.PendingBytes = pendingBytes(&a, *lsn, segSize)
	}
	return &a, nil
}

// pendingBytes is the WAL between lsn and the end of the last archived segment; while archiving fails, at
// least the WAL from the start of the segment that failed (which covers a server that never archived one).
func pendingBytes(a *Archiver, lsn, segSize int64) int64 {
	var pending int64
	if end, ok := SegmentEnd(a.ArchivedWAL, segSize); ok {
		pending = lsn - end
	}
	if end, ok := SegmentEnd(a.FailedWAL, segSize); ok && a.Failing() {
		pending = max(pending, lsn-(end-segSize))
	}
	return max(0, pending)
}

// SegmentEnd is the LSN (as bytes since 0/0) where the WAL segment named name ends, for segments of
// segSize bytes; ok is false for a name that is not a segment's (a timeline history file, say). A
// segment's name is its timeline, then the LSN's high 32 bits, then the segment's number within those, in
// 8 hex digits each; a suffix (".partial", ".00000028.backup") is ignored.
func SegmentEnd(name string, segSize int64) (end int64, ok bool) {
	if len(name) < 24 || segSize <= 0 {
		return 0, false
	}
	hi, err1 := strconv.ParseUint(name[8:16], 16, 32)
	seg, err2 := strconv.ParseUint(name[16:24], 16, 32)
	if _, err0 := strconv.ParseUint(name[:8], 16, 32); err0 != nil || err1 != nil || err2 != nil {
		return 0, false
	}
	return int64(hi)<<32 + (int64(seg)+1)*segSize, true
}
