package postgres

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// RestorePoint is a named restore point as PostgreSQL wrote it into the WAL.
type RestorePoint struct {
	LSN  string    // the end of its WAL record (what pg_create_restore_point returns)
	Time time.Time // the time in its record (xl_restore_point.rp_time), which recovery logs on reaching it
}

// pgEpoch is PostgreSQL's timestamp origin.
var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// CreateRestorePoint writes a named restore point (pg_create_restore_point) on a superuser connection and
// reads its record back from the WAL for the time PostgreSQL stamped it with: a time taken by the caller
// before or after could let a restore to that time take more or less than a restore to the point.
func CreateRestorePoint(ctx context.Context, conn *pgx.Conn, name string) (*RestorePoint, error) {
	rp := &RestorePoint{}
	// The record must be written out of the WAL buffers to be read from the file: in a transaction that
	// has an xid, the commit flushes the WAL up to its commit record, after the point's.
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		var xid int64
		return tx.QueryRow(ctx, "SELECT pg_catalog.pg_create_restore_point($1)::text, pg_catalog.txid_current()", name).Scan(&rp.LSN, &xid)
	})
	if err != nil {
		return nil, fmt.Errorf("create restore point: %w", err)
	}
	t, err := restorePointTime(ctx, conn, name, rp.LSN)
	if err != nil {
		return nil, fmt.Errorf("read restore point %s back from the WAL: %w", name, err)
	}
	rp.Time = t
	return rp, nil
}

// restorePointTime finds the restore point's record, which ends at lsn, in the WAL segment file and returns
// its rp_time. The record's main data is a short data block: id 255, length 72, then xl_restore_point
// {TimestampTz rp_time; char rp_name[64]}. It may span two WAL pages: the page headers are cut out first.
func restorePointTime(ctx context.Context, conn *pgx.Conn, name, lsn string) (time.Time, error) {
	var (
		file             string
		off, page, segSz int64
	)
	err := conn.QueryRow(ctx, `SELECT w.file_name, w.file_offset, current_setting('wal_block_size')::bigint,
		pg_catalog.pg_size_bytes(current_setting('wal_segment_size'))
		FROM pg_catalog.pg_walfile_name_offset($1::pg_lsn - 1) w`, lsn).Scan(&file, &off, &page, &segSz)
	if err != nil {
		return time.Time{}, err
	}
	off++ // the record's end within the file
	// Two pages (the record is 98 bytes, far less than a page) up to the record's end.
	pageStart := max(off-1-(off-1)%page-page, 0)
	var raw []byte
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.pg_read_binary_file('pg_wal/' || $1, $2, $3)", file, pageStart, off-pageStart).Scan(&raw); err != nil {
		return time.Time{}, err
	}
	var stream []byte
	for p := int64(0); p < int64(len(raw)); p += page {
		hdr := int64(24) // SizeOfXLogShortPHD
		if (pageStart+p)%segSz == 0 {
			hdr = 40 // SizeOfXLogLongPHD: a segment's first page
		}
		stream = append(stream, raw[min(p+hdr, int64(len(raw))):min(p+page, int64(len(raw)))]...)
	}
	// Look for the name, preceded by the time and, before it, the block header (255, 72).
	needle := append([]byte(name), 0)
	for i := bytes.LastIndex(stream, needle); i >= 0; i = bytes.LastIndex(stream[:i], needle) {
		if i < 10 || stream[i-10] != 255 || stream[i-9] != 72 {
			continue
		}
		us := int64(binary.LittleEndian.Uint64(stream[i-8 : i]))
		return pgEpoch.Add(time.Duration(us) * time.Microsecond), nil
	}
	return time.Time{}, fmt.Errorf("no restore point record named %s before %s in %s", name, lsn, file)
}
