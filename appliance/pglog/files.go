package pglog

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Dirs are where an instance's logs are: Live is <pgdata>/log; Archive ("" when the archive is off) holds
// rotated files compressed as postgresql-YYYY-MM-DD.json.gz.
type Dirs struct{ Live, Archive string }

const (
	filePrefix = "postgresql-"
	jsonSuffix = ".json"
	gzSuffix   = ".json.gz"
	// stderrSuffix is the file the logging collector keeps for what reaches its stderr (a few lines
	// at start, a crashing library's output): Maintain deletes old ones, nothing reads them.
	stderrSuffix = ".log"
)

// logFile is one day's log: the live file, or its archived copy when the live one is gone.
type logFile struct {
	day  day
	path string
	gz   bool
}

// dayOfName returns the day of "postgresql-YYYY-MM-DD<suffix>".
func dayOfName(name, suffix string) (day, bool) {
	rest, ok := strings.CutPrefix(name, filePrefix)
	if !ok {
		return 0, false
	}
	date, ok := strings.CutSuffix(rest, suffix)
	if !ok || len(date) != 10 || date[4] != '-' || date[7] != '-' {
		return 0, false
	}
	n, err := strconv.Atoi(date[:4] + date[5:7] + date[8:])
	if err != nil || n < 0 || !day(n).valid() {
		return 0, false
	}
	return day(n), true
}

// listDays lists the files with suffix in dir by day, oldest first. A missing dir is empty.
func listDays(dir, suffix string) ([]logFile, error) {
	if dir == "" {
		return nil, nil
	}
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list logs: %w", err)
	}
	var out []logFile
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		if d, ok := dayOfName(e.Name(), suffix); ok {
			out = append(out, logFile{day: d, path: filepath.Join(dir, e.Name()), gz: suffix == gzSuffix})
		}
	}
	slices.SortFunc(out, func(a, b logFile) int { return int(a.day - b.day) })
	return out, nil
}

// listFiles lists every day's log, oldest first: the live file when there is one (it can be read
// backwards), else the archived copy.
func listFiles(d Dirs) ([]logFile, error) {
	live, err := listDays(d.Live, jsonSuffix)
	if err != nil {
		return nil, err
	}
	arch, err := listDays(d.Archive, gzSuffix)
	if err != nil {
		return nil, err
	}
	have := make(map[day]bool, len(live))
	for _, f := range live {
		have[f.day] = true
	}
	for _, f := range arch {
		if !have[f.day] {
			live = append(live, f)
		}
	}
	slices.SortFunc(live, func(a, b logFile) int { return int(a.day - b.day) })
	return live, nil
}

func liveName(d day) string    { return filePrefix + d.String() + jsonSuffix }
func archiveName(d day) string { return filePrefix + d.String() + gzSuffix }

// openDay opens a day's log for reading forwards: the live file, or when it is gone (compressed since
// it was listed) the archived copy. r reads the uncompressed content; f is the live file, nil for an
// archive. A day with neither gives fs.ErrNotExist; an archive that is not gzip, errDamagedArchive.
func openDay(d Dirs, dy day) (r io.ReadCloser, f *os.File, err error) {
	if d.Live != "" {
		f, err := os.Open(filepath.Join(d.Live, liveName(dy)))
		if err == nil {
			return f, f, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, nil, fmt.Errorf("open log: %w", err)
		}
	}
	if d.Archive != "" {
		gf, err := os.Open(filepath.Join(d.Archive, archiveName(dy)))
		if err == nil {
			zr, err := gzip.NewReader(gf)
			if err != nil {
				gf.Close()
				return nil, nil, fmt.Errorf("open archived log %s: %w: %w", archiveName(dy), errDamagedArchive, err)
			}
			return gzReadCloser{zr, gf}, nil, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, nil, fmt.Errorf("open archived log: %w", err)
		}
	}
	return nil, nil, fs.ErrNotExist
}

// errDamagedArchive is an archived file that is not gzip: readers skip its day.
var errDamagedArchive = errors.New("damaged archive")

type gzReadCloser struct {
	*gzip.Reader
	f *os.File
}

func (g gzReadCloser) Close() error {
	g.Reader.Close()
	return g.f.Close()
}
