package pglog

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// Query selects entries.
type Query struct {
	Since        time.Time       // entries at or after Since (ignored when After is set)
	After        string          // a cursor: entries strictly after that entry
	Severities   map[string]bool // nil: all
	Limit        int             // at most this many (caller bounds it 1..500)
	ExcludeUsers []string        // entries whose user is one of these are left out (the appliance's own admin role)

	// The search (every one given must hold):
	Until    time.Time // entries at or before Until (zero: no bound)
	Text     string    // entries whose message, detail, hint or statement (passwords masked) contain Text, ignoring case
	User     string    // entries of this role
	Database string    // entries of this database
	SQLState string    // entries with this SQLSTATE (5 characters, upper case)
}

// DefaultLimit is the Limit of a Query that gives none (0 or less).
const DefaultLimit = 100

// sinceSlack is how far past Since a backward read goes on: the logging collector writes lines in the
// order they reach it, which can differ by a few milliseconds from the order of their timestamps.
const sinceSlack = time.Minute

// Read returns entries oldest first, and next: the cursor to resume after (the last entry returned; the
// given cursor when nothing new; with no entries and no cursor, a cursor naming the current end so a tail
// can start "from now").
//
// Without After: the NEWEST Limit matching entries at or after Since. With After: the OLDEST Limit
// matching entries after the cursor (so a client paging forward loses nothing).
//
// With After, when lines were read but none matched, next is past the last line read, so that the next
// call does not read them again.
func Read(d Dirs, q Query) (entries []Entry, next string, err error) {
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultLimit
	}
	if q.After != "" {
		p, err := parseCursor(q.After)
		if err != nil {
			return nil, "", err
		}
		return readAfter(d, p, q.After, newMatcher(q, false), limit)
	}
	return readNewest(d, newMatcher(q, true), limit)
}

// readAfter reads forwards from p: the oldest limit matching entries after it.
func readAfter(d Dirs, p pos, after string, m *matcher, limit int) ([]Entry, string, error) {
	files, err := listFiles(d)
	if err != nil {
		return nil, "", err
	}
	var out []Entry
	cur, scanned := p, false
	for _, f := range files {
		if f.day < p.day {
			continue
		}
		start := int64(0)
		if f.day == p.day {
			start = p.off
		}
		err := scanDay(d, f.day, start, func(line []byte, end int64) bool {
			cur, scanned = pos{f.day, end}, true
			if e, _, ok := m.check(line); ok {
				e.Cursor = cur.String()
				out = append(out, e)
			}
			return len(out) < limit
		})
		if err != nil {
			return nil, "", err
		}
		if len(out) >= limit {
			break
		}
	}
	switch {
	case len(out) > 0:
		return out, out[len(out)-1].Cursor, nil
	case scanned:
		return nil, cur.String(), nil
	}
	return nil, after, nil
}

// scanDay reads a day's log forwards from offset start (see readForward). A day whose file is gone is
// empty, and so is a damaged archive; one that cannot be decompressed to its end ends where it can no
// longer be read.
func scanDay(d Dirs, dy day, start int64, fn func(line []byte, end int64) bool) error {
	r, lf, err := openDay(d, dy)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errDamagedArchive) {
		return nil
	}
	if err != nil {
		return err
	}
	defer r.Close()
	if lf != nil {
		if _, err := lf.Seek(start, io.SeekStart); err != nil {
			return fmt.Errorf("seek log: %w", err)
		}
	} else if start > 0 {
		if _, err := io.CopyN(io.Discard, r, start); err != nil {
			return nil // the content ends before start: nothing after it
		}
	}
	_, err = readForward(r, start, fn)
	if err != nil && lf == nil {
		return nil
	}
	return err
}

// readNewest reads backwards from the end: the newest limit matching entries at or after m.since.
func readNewest(d Dirs, m *matcher, limit int) ([]Entry, string, error) {
	files, err := listFiles(d)
	if err != nil {
		return nil, "", err
	}
	var stopBefore time.Time // a line older than this ends the read
	if !m.since.IsZero() {
		stopBefore = m.since.Add(-sinceSlack)
	}
	var rev []Entry // newest first
	for i := len(files) - 1; i >= 0 && len(rev) < limit; i-- {
		f := files[i]
		if !stopBefore.IsZero() && !f.day.end().After(stopBefore) {
			break // this day and all before it are older than Since
		}
		if !m.until.IsZero() && f.day.start().After(m.until.Add(sinceSlack)) {
			continue // this day is newer than Until
		}
		if !f.gz {
			more, err := newestLive(d, f.day, f.path, m, limit, stopBefore, &rev)
			if err != nil {
				return nil, "", err
			}
			if !more {
				break
			}
			continue
		}
		// An archive can only be read forwards: keep the newest matches in a ring.
		need := limit - len(rev)
		ring, n := make([]Entry, need), 0
		err := scanDay(d, f.day, 0, func(line []byte, end int64) bool {
			if e, _, ok := m.check(line); ok {
				e.Cursor = pos{f.day, end}.String()
				ring[n%need] = e
				n++
			}
			return true
		})
		if err != nil {
			return nil, "", err
		}
		for k := n - 1; k >= 0 && k >= n-need; k-- {
			rev = append(rev, ring[k%need])
		}
	}
	if len(rev) == 0 {
		p, err := endPos(d)
		if err != nil {
			return nil, "", err
		}
		return nil, p.String(), nil
	}
	out := make([]Entry, len(rev))
	for i, e := range rev {
		out[len(rev)-1-i] = e
	}
	return out, out[len(out)-1].Cursor, nil
}

// newestLive reads a live file backwards, appending its matches to *rev (newest first) until there are
// limit. more is false when the read found lines older than stopBefore (older files need no reading).
// A file compressed away since it was listed is read from the archive.
func newestLive(d Dirs, dy day, path string, m *matcher, limit int, stopBefore time.Time, rev *[]Entry) (more bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) && d.Archive != "" {
		// Compressed since it was listed: the archive holds the same lines. Rare; read it forwards.
		var all []Entry
		err := scanDay(Dirs{Archive: d.Archive}, dy, 0, func(line []byte, end int64) bool {
			if e, _, ok := m.check(line); ok {
				e.Cursor = pos{dy, end}.String()
				all = append(all, e)
			}
			return true
		})
		for k := len(all) - 1; k >= 0 && len(*rev) < limit; k-- {
			*rev = append(*rev, all[k])
		}
		return true, err
	}
	if errors.Is(err, fs.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("open log: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return false, fmt.Errorf("stat log: %w", err)
	}
	more = true
	_, err = readBackward(f, st.Size(), func(line []byte, end int64) bool {
		e, ts, ok := m.check(line)
		if !stopBefore.IsZero() && !ts.IsZero() && ts.Before(stopBefore) {
			more = false
			return false
		}
		if ok {
			e.Cursor = pos{dy, end}.String()
			*rev = append(*rev, e)
		}
		return len(*rev) < limit
	})
	if err != nil {
		return false, fmt.Errorf("read log %s: %w", filepath.Base(path), err)
	}
	return more, nil
}

// endPos is the position after the last complete line written so far: a cursor that a tail starts from
// to get only what is written next. With no logs at all, it is before every file.
func endPos(d Dirs) (pos, error) {
	files, err := listFiles(d)
	if err != nil {
		return pos{}, err
	}
	if len(files) == 0 {
		return zeroPos, nil
	}
	last := files[len(files)-1]
	if last.gz {
		return pos{last.day.next(), 0}, nil // an archived day is complete
	}
	f, err := os.Open(last.path)
	if errors.Is(err, fs.ErrNotExist) {
		return pos{last.day.next(), 0}, nil // compressed since it was listed: complete
	}
	if err != nil {
		return pos{}, fmt.Errorf("open log: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return pos{}, fmt.Errorf("stat log: %w", err)
	}
	end, err := lastLineEnd(f, st.Size())
	if err != nil {
		return pos{}, err
	}
	return pos{last.day, end}, nil
}

// Scan calls fn with every entry that q selects between q.Since and q.Until, oldest first, at most max of
// them (q.After and q.Limit are ignored), reading the archived days too; it stops at fn's first error and
// returns it. n is how many entries fn was given. Nothing is held in memory: it is what a download streams.
func Scan(d Dirs, q Query, max int, fn func(Entry) error) (n int, err error) {
	files, err := listFiles(d)
	if err != nil {
		return 0, err
	}
	m := newMatcher(q, true)
	var fnErr error
	for _, f := range files {
		if !m.since.IsZero() && !f.day.end().After(m.since.Add(-sinceSlack)) {
			continue // older than Since
		}
		if !m.until.IsZero() && f.day.start().After(m.until.Add(sinceSlack)) {
			break // this day and all after it are newer than Until
		}
		err := scanDay(d, f.day, 0, func(line []byte, end int64) bool {
			e, ts, ok := m.check(line)
			if !m.until.IsZero() && ts.After(m.until.Add(sinceSlack)) {
				return false // the rest of the day is newer than Until
			}
			if !ok {
				return true
			}
			e.Cursor = pos{f.day, end}.String()
			if fnErr = fn(e); fnErr != nil {
				return false
			}
			n++
			return n < max
		})
		if fnErr != nil {
			return n, fnErr
		}
		if err != nil {
			return n, err
		}
		if n >= max {
			break
		}
	}
	return n, nil
}
