package postgres

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
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

// restorePointTime finds the restore point's record, which ends at lsn, in the WAL and returns its rp_time.
// The record's main data is a short data block: id 255, length 72, then xl_restore_point
// {TimestampTz rp_time; char rp_name[64]}. The record (about 100 bytes) may span two WAL pages, and those
// two pages two segment files (the record starts at the end of one segment and its rest follows the next
// one's long page header, flagged XLP_FIRST_IS_CONTRECORD): the two pages up to its end are read, each from
// its own segment file, and their page headers are cut out.
func restorePointTime(ctx context.Context, conn *pgx.Conn, name, lsn string) (time.Time, error) {
	end, err := parseLSN(lsn)
	if err != nil {
		return time.Time{}, err
	}
	var (
		last        string
		page, segSz uint64
	)
	err = conn.QueryRow(ctx, `SELECT pg_catalog.pg_walfile_name($1::pg_lsn), current_setting('wal_block_size')::bigint,
		pg_catalog.pg_size_bytes(current_setting('wal_segment_size'))`, lsn).Scan(&last, &page, &segSz)
	if err != nil {
		return time.Time{}, err
	}
	tli, err := strconv.ParseUint(last[:8], 16, 32) // the file name's timeline: the one being written
	if err != nil || page == 0 || segSz == 0 || segSz%page != 0 || end == 0 {
		return time.Time{}, fmt.Errorf("WAL file %s, page size %d, segment size %d, end %s", last, page, segSz, lsn)
	}
	segsPerID := uint64(1<<32) / segSz
	var stream []byte
	for ps := max((end-1)-(end-1)%page, page) - page; ps < end; ps += page {
		seg, off := ps/segSz, ps%segSz
		file := fmt.Sprintf("%08X%08X%08X", tli, seg/segsPerID, seg%segsPerID)
		n := min(page, end-ps)
		var raw []byte
		if err := conn.QueryRow(ctx, "SELECT pg_catalog.pg_read_binary_file('pg_wal/' || $1, $2, $3)", file, int64(off), int64(n)).Scan(&raw); err != nil {
			return time.Time{}, fmt.Errorf("read WAL file %s at %d: %w", file, off, err)
		}
		hdr := uint64(24) // SizeOfXLogShortPHD
		if off == 0 {
			hdr = 40 // SizeOfXLogLongPHD: a segment's first page
		}
		stream = append(stream, raw[min(hdr, uint64(len(raw))):]...)
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
	return time.Time{}, fmt.Errorf("no restore point record named %s before %s in the WAL", name, lsn)
}

// parseLSN reads a pg_lsn's text (X/Y, hexadecimal).
func parseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, fmt.Errorf("not an LSN: %q", s)
	}
	return h<<32 | l, nil
}
