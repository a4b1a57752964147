package pglog

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrBadCursor is returned (wrapped) for a cursor that does not parse.
var ErrBadCursor = errors.New("malformed log cursor")

// day is a UTC calendar day as yyyymmdd, so that days compare as integers.
type day int

func dayOf(t time.Time) day {
	t = t.UTC()
	return day(t.Year()*10000 + int(t.Month())*100 + t.Day())
}

// start is the day's first instant.
func (d day) start() time.Time {
	return time.Date(int(d)/10000, time.Month(int(d)/100%100), int(d)%100, 0, 0, 0, 0, time.UTC)
}

// end is the next day's first instant.
func (d day) end() time.Time { return d.start().AddDate(0, 0, 1) }

func (d day) next() day { return dayOf(d.end()) }

// valid reports whether d names a real date (not the 31st of February).
func (d day) valid() bool { return d >= 10101 && dayOf(d.start()) == d }

// String is the date as log files name it: 2026-11-25.
func (d day) String() string {
	return fmt.Sprintf("%04d-%02d-%02d", int(d)/10000, int(d)/100%100, int(d)%100)
}

// pos is a position in the logs: a day's file and a byte offset in its uncompressed content. The archived
// .gz of a day holds the same content as the live file had, so a position survives compression.
//
// A cursor is the position just past an entry's line (where the next line starts): "entries after the
// cursor" are the lines that start at or after it, in its day's file and in every later day's. A position
// whose day has no file any more (pruned) leads to the next day that still has one, from its start.
type pos struct {
	day day
	off int64
}

// zeroPos is before every file: the cursor of "now" when there are no logs at all yet.
var zeroPos = pos{day: 19700101}

// String encodes the cursor: URL-safe, e.g. "20261125.1496". Clients treat it as opaque.
func (p pos) String() string { return strconv.Itoa(int(p.day)) + "." + strconv.FormatInt(p.off, 10) }

func parseCursor(s string) (pos, error) {
	ds, offs, ok := strings.Cut(s, ".")
	if !ok || len(ds) != 8 || offs == "" || len(offs) > 19 {
		return pos{}, fmt.Errorf("%w: %q", ErrBadCursor, s)
	}
	for _, c := range ds + offs {
		if c < '0' || c > '9' {
			return pos{}, fmt.Errorf("%w: %q", ErrBadCursor, s)
		}
	}
	d, _ := strconv.Atoi(ds)
	off, err := strconv.ParseInt(offs, 10, 64)
	if err != nil || !day(d).valid() {
		return pos{}, fmt.Errorf("%w: %q", ErrBadCursor, s)
	}
	return pos{day: day(d), off: off}, nil
}
