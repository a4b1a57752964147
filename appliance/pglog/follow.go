package pglog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"
)

// DefaultPoll is Follow's poll interval when it is given none.
const DefaultPoll = time.Second

// Follow calls fn, oldest first, with every matching entry written after the cursor (after "": from the
// current end), as the server writes them, until ctx ends (ctx.Err() is returned) or fn returns an error
// (returned). It polls every poll interval, survives a new day's file appearing (rotation) and files not
// existing yet. A partially written last line (no newline yet) is not read until complete.
//
// Of q, Follow uses Severities and ExcludeUsers; Since, After and Limit do not apply. A malformed after
// gives ErrBadCursor (wrapped) at once.
func Follow(ctx context.Context, d Dirs, after string, q Query, poll time.Duration, fn func(Entry) error) error {
	if poll <= 0 {
		poll = DefaultPoll
	}
	var p pos
	var err error
	if after == "" {
		p, err = endPos(d)
	} else {
		p, err = parseCursor(after)
	}
	if err != nil {
		return err
	}
	fl := &follower{d: d, p: p, m: newMatcher(q, false), fn: fn, ctx: ctx}
	defer fl.close()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		if err := fl.catchUp(); err != nil {
			return err
		}
		t.Reset(poll)
	}
}

// follower is Follow's state: the position reached, and the live file being read, kept open so that
// its compression (rename, then removal) does not take it away before its last line is read.
type follower struct {
	ctx context.Context
	d   Dirs
	p   pos
	m   *matcher
	fn  func(Entry) error

	f    *os.File // the live file of p.day, or nil
	seen int      // lines read, for checking ctx now and then
}

func (fl *follower) close() {
	if fl.f != nil {
		fl.f.Close()
		fl.f = nil
	}
}

// catchUp delivers everything complete after fl.p: the rest of the current day's file, then each later
// day's, and returns when the newest file has nothing more.
func (fl *follower) catchUp() error {
	for {
		if fl.f == nil {
			files, err := listFiles(fl.d)
			if err != nil {
				return err
			}
			var next *logFile
			for i := range files {
				if files[i].day >= fl.p.day {
					next = &files[i]
					break
				}
			}
			if next == nil {
				return nil // nothing yet, or nothing newer than the position
			}
			if next.day > fl.p.day {
				fl.p = pos{next.day, 0}
			}
			r, lf, err := openDay(fl.d, fl.p.day)
			if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, errDamagedArchive) {
				return err
			}
			if err != nil || lf == nil {
				// An archived day (or one gone since listed, or a damaged archive) is complete: read it
				// through, go on.
				if r != nil {
					err = fl.readArchive(r)
					r.Close()
					if err != nil {
						return err
					}
				}
				fl.p = pos{fl.p.day.next(), 0}
				continue
			}
			fl.f = lf
		}

		if err := fl.readLive(); err != nil {
			return err
		}
		// At the end of the file. The logging collector creates the next day's file when it rotates and
		// writes no more to this one after that: once a newer file exists, read this one to its end once
		// more (a line may have come between the read and the look) and move on.
		files, err := listFiles(fl.d)
		if err != nil {
			return err
		}
		if len(files) == 0 || files[len(files)-1].day <= fl.p.day {
			return nil
		}
		if err := fl.readLive(); err != nil {
			return err
		}
		fl.close()
		fl.p = pos{fl.p.day.next(), 0}
	}
}

// readLive delivers the complete lines of the open live file from fl.p.
func (fl *follower) readLive() error {
	if _, err := fl.f.Seek(fl.p.off, io.SeekStart); err != nil {
		return fmt.Errorf("seek log: %w", err)
	}
	return fl.read(fl.f, false)
}

// readArchive delivers the lines of an archived day from fl.p.
func (fl *follower) readArchive(r io.Reader) error {
	if fl.p.off > 0 {
		if _, err := io.CopyN(io.Discard, r, fl.p.off); err != nil {
			return nil // the content ends before the position
		}
	}
	return fl.read(r, true)
}

func (fl *follower) read(r io.Reader, archived bool) error {
	var stopErr error
	dy := fl.p.day
	_, err := readForward(r, fl.p.off, func(line []byte, end int64) bool {
		fl.seen++
		if fl.seen%1024 == 0 {
			if err := fl.ctx.Err(); err != nil {
				stopErr = err
				return false
			}
		}
		e, _, ok := fl.m.check(line)
		fl.p = pos{dy, end}
		if ok {
			e.Cursor = fl.p.String()
			if err := fl.fn(e); err != nil {
				stopErr = err
				return false
			}
		}
		return true
	})
	if stopErr != nil {
		return stopErr
	}
	if err != nil && archived {
		return nil // a damaged archive ends where it can no longer be read
	}
	return err
}
