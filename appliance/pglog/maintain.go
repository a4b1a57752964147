package pglog

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// rotationGrace is how long after a day ends its file is left alone when no newer file exists yet: the
// logging collector switches files at midnight UTC, and a line may still reach the old file in the
// moment before. Once the next day's file exists, the old one is finished.
const rotationGrace = 5 * time.Minute

// tempPrefix names Maintain's partly written archives; one left by a crash is removed after an hour.
const tempPrefix = ".pglog-"

// Maintain is the periodic housekeeping: with d.Archive set, every live file older than today's (by its
// name's date vs now, UTC) is gzip-compressed into d.Archive (same name + ".gz", written to a temp name
// and renamed; then the live file is removed) and archived files older than keepArchive are deleted; live
// files older than keepLive are deleted either way. Today's file is never touched. Returns how many files
// it compressed and deleted.
//
// A file is older than a keep when its whole day is: its day ended at least keep before now. A keep of 0
// or less keeps files forever. A past day's file is left alone until the next day's file exists or its
// day ended rotationGrace ago. The logging collector's stderr files (postgresql-YYYY-MM-DD.log) are
// deleted like live files and never archived. An error on one file does not stop the others; the errors
// are joined.
func Maintain(d Dirs, now time.Time, keepLive, keepArchive time.Duration) (compressed, deleted int, err error) {
	now = now.UTC()
	today := dayOf(now)
	older := func(dy day, keep time.Duration) bool { return keep > 0 && !now.Before(dy.end().Add(keep)) }
	var errs []error

	live, err := listDays(d.Live, jsonSuffix)
	if err != nil {
		return 0, 0, err
	}
	newest := day(0)
	for _, f := range live {
		newest = max(newest, f.day)
	}
	remove := func(path string) {
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			errs = append(errs, fmt.Errorf("remove log: %w", err))
			return
		}
		deleted++
	}
	for _, f := range live {
		if f.day >= today || (f.day >= newest && now.Before(f.day.end().Add(rotationGrace))) {
			continue
		}
		switch {
		case d.Archive != "" && older(f.day, keepArchive):
			remove(f.path) // it would be deleted from the archive right away
		case d.Archive != "":
			if err := compress(f.path, d.Archive, archiveName(f.day)); err != nil {
				errs = append(errs, err)
				if older(f.day, keepLive) {
					remove(f.path)
				}
				continue
			}
			compressed++
		case older(f.day, keepLive):
			remove(f.path)
		}
	}

	stderrFiles, err := listDays(d.Live, stderrSuffix)
	if err != nil {
		errs = append(errs, err)
	}
	for _, f := range stderrFiles {
		if f.day < today && older(f.day, keepLive) {
			remove(f.path)
		}
	}

	if d.Archive != "" {
		arch, err := listDays(d.Archive, gzSuffix)
		if err != nil {
			errs = append(errs, err)
		}
		for _, f := range arch {
			if older(f.day, keepArchive) {
				remove(f.path)
			}
		}
		removeStaleTemps(d.Archive, now)
	}
	return compressed, deleted, errors.Join(errs...)
}

// compress writes the gzip of the file at src to dir/name through a temp file and a rename, then removes
// src. The archive is synced before src goes.
func compress(src, dir, name string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("compress log: %w", err)
	}
	defer in.Close()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("compress log: %w", err)
	}
	tmp, err := os.CreateTemp(dir, tempPrefix+name+".*") // mode 0600
	if err != nil {
		return fmt.Errorf("compress log: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	zw := gzip.NewWriter(tmp)
	zw.Name = filepath.Base(src)
	if _, err := io.Copy(zw, in); err != nil {
		return fmt.Errorf("compress log %s: %w", filepath.Base(src), err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("compress log %s: %w", filepath.Base(src), err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("compress log %s: %w", filepath.Base(src), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("compress log %s: %w", filepath.Base(src), err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("compress log %s: %w", filepath.Base(src), err)
	}
	syncDir(dir)
	if err := os.Remove(src); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("remove compressed log: %w", err)
	}
	return nil
}

func syncDir(dir string) {
	if f, err := os.Open(dir); err == nil {
		f.Sync()
		f.Close()
	}
}

// removeStaleTemps removes temp files of compressions that did not finish, an hour after they were last
// written.
func removeStaleTemps(dir string, now time.Time) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), tempPrefix) {
			continue
		}
		if info, err := e.Info(); err == nil && now.Sub(info.ModTime()) > time.Hour {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}
