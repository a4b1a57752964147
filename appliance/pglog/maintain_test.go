package pglog

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"
)

const dayLen = 24 * time.Hour

func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

func gunzip(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestMaintainArchive(t *testing.T) {
	e := setup(t)
	content := map[string]string{}
	for _, d := range []string{"2026-11-20", "2026-11-21", "2026-11-22", "2026-11-23", "2026-11-24", "2026-11-25"} {
		content[d] = dayLines(d, 5)
		e.appendLive(d, content[d])
	}
	e.appendLive("2026-11-25", "") // today's
	os.WriteFile(filepath.Join(e.dirs.Live, "postgresql-2026-11-20.log"), []byte("stderr\n"), 0o600)
	os.WriteFile(filepath.Join(e.dirs.Live, "postgresql-2026-11-25.log"), nil, 0o600)
	os.WriteFile(filepath.Join(e.dirs.Live, "other.txt"), nil, 0o600)

	now := ts("2026-11-25 12:00")
	// keepArchive 3 days: the 20th and 21st ended 3 days ago (deleted, not archived), the 22nd did not.
	compressed, deleted, err := Maintain(e.dirs, now, dayLen, 3*dayLen)
	if err != nil {
		t.Fatal(err)
	}
	if compressed != 3 || deleted != 3 {
		t.Errorf("compressed %d, deleted %d, want 3 and 3", compressed, deleted)
	}
	if got, w := names(t, e.dirs.Live), []string{"other.txt", "postgresql-2026-11-25.json", "postgresql-2026-11-25.log"}; !slices.Equal(got, w) {
		t.Errorf("live %v, want %v", got, w)
	}
	if got, w := names(t, e.dirs.Archive), []string{"postgresql-2026-11-22.json.gz", "postgresql-2026-11-23.json.gz", "postgresql-2026-11-24.json.gz"}; !slices.Equal(got, w) {
		t.Errorf("archive %v, want %v", got, w)
	}
	for _, d := range []string{"2026-11-22", "2026-11-23", "2026-11-24"} {
		if got := gunzip(t, e.archivePath(d)); got != content[d] {
			t.Errorf("archive of %s differs", d)
		}
		if st, err := os.Stat(e.archivePath(d)); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("archive of %s: %v %v", d, st.Mode(), err)
		}
	}

	// Again the same day: nothing to do.
	compressed, deleted, err = Maintain(e.dirs, now, dayLen, 3*dayLen)
	if err != nil || compressed != 0 || deleted != 0 {
		t.Errorf("second run: %d %d %v", compressed, deleted, err)
	}
	// Two days later the 22nd and 23rd leave the archive, and the 25th's stderr file its day's keep.
	compressed, deleted, err = Maintain(e.dirs, now.Add(2*dayLen), dayLen, 3*dayLen)
	if err != nil || deleted != 3 {
		t.Errorf("two days later: %d %d %v", compressed, deleted, err)
	}
	// Today's file was compressed only once it was no longer today's.
	if compressed != 1 || !slices.Contains(names(t, e.dirs.Archive), "postgresql-2026-11-25.json.gz") {
		t.Errorf("compressed %d: %v", compressed, names(t, e.dirs.Archive))
	}
}

func TestMaintainNoArchive(t *testing.T) {
	e := setup(t)
	e.dirs.Archive = ""
	for _, d := range []string{"2026-11-20", "2026-11-21", "2026-11-22", "2026-11-23", "2026-11-24", "2026-11-25"} {
		e.appendLive(d, dayLines(d, 2))
	}
	// keepLive 2 days at noon on the 25th: the days that ended by the 23rd at noon go (20th, 21st, 22nd).
	compressed, deleted, err := Maintain(e.dirs, ts("2026-11-25 12:00"), 2*dayLen, time.Hour)
	if err != nil || compressed != 0 || deleted != 3 {
		t.Fatalf("%d %d %v", compressed, deleted, err)
	}
	if got, w := names(t, e.dirs.Live), []string{"postgresql-2026-11-23.json", "postgresql-2026-11-24.json", "postgresql-2026-11-25.json"}; !slices.Equal(got, w) {
		t.Errorf("live %v, want %v", got, w)
	}
	// A keep of 0 keeps forever; today's file is never touched, whatever the keep.
	if c, d, err := Maintain(e.dirs, ts("2026-11-25 12:00"), 0, 0); c != 0 || d != 0 || err != nil {
		t.Errorf("keep 0: %d %d %v", c, d, err)
	}
	if c, d, err := Maintain(e.dirs, ts("2026-11-25 23:59"), time.Nanosecond, 0); c != 0 || d != 2 || err != nil {
		t.Errorf("keep 1ns: %d %d %v", c, d, err)
	}
	if got, w := names(t, e.dirs.Live), []string{"postgresql-2026-11-25.json"}; !slices.Equal(got, w) {
		t.Errorf("live %v, want %v", got, w)
	}
}

// Just after midnight, yesterday's file is left alone until today's exists or a few minutes passed: the
// server may still be finishing it.
func TestMaintainRotationGrace(t *testing.T) {
	e := setup(t)
	e.appendLive("2026-11-24", dayLines("2026-11-24", 2))
	if c, _, err := Maintain(e.dirs, ts("2026-11-25 00:01"), dayLen, 30*dayLen); c != 0 || err != nil {
		t.Fatalf("right after midnight: compressed %d, %v", c, err)
	}
	if c, _, err := Maintain(e.dirs, ts("2026-11-25 00:10"), dayLen, 30*dayLen); c != 1 || err != nil {
		t.Fatalf("10 minutes after: compressed %d, %v", c, err)
	}
	e.appendLive("2026-11-25", dayLines("2026-11-25", 2))
	e.appendLive("2026-11-26", dayLines("2026-11-26", 2)) // the server rotated
	if c, _, err := Maintain(e.dirs, ts("2026-11-26 00:00").Add(time.Second), dayLen, 30*dayLen); c != 1 || err != nil {
		t.Fatalf("after rotation: compressed %d, %v", c, err)
	}
}

func TestMaintainStaleTemp(t *testing.T) {
	e := setup(t)
	stale := filepath.Join(e.dirs.Archive, tempPrefix+"postgresql-2026-11-20.json.gz.123")
	fresh := filepath.Join(e.dirs.Archive, tempPrefix+"postgresql-2026-11-21.json.gz.456")
	os.WriteFile(stale, []byte("x"), 0o600)
	os.WriteFile(fresh, []byte("x"), 0o600)
	now := time.Now()
	os.Chtimes(stale, now.Add(-2*time.Hour), now.Add(-2*time.Hour))
	if _, _, err := Maintain(e.dirs, now, dayLen, dayLen); err != nil {
		t.Fatal(err)
	}
	if got := names(t, e.dirs.Archive); !slices.Equal(got, []string{filepath.Base(fresh)}) {
		t.Errorf("archive %v", got)
	}
	// The archive directory is made when missing.
	e2 := setup(t)
	e2.dirs.Archive = filepath.Join(t.TempDir(), "new", "archive")
	e2.appendLive("2026-11-24", dayLines("2026-11-24", 2))
	if c, _, err := Maintain(e2.dirs, ts("2026-11-25 12:00"), dayLen, 30*dayLen); c != 1 || err != nil {
		t.Fatalf("%d %v", c, err)
	}
}

// Cursors name the same entries before and after their day is compressed, and a reader holding a
// cursor into it goes on from the archive.
func TestCursorsSurviveCompression(t *testing.T) {
	e := setup(t)
	e.appendLive("2026-11-23", dayLines("2026-11-23", 10))
	e.appendLive("2026-11-24", dayLines("2026-11-24", 10))
	e.appendLive("2026-11-25", dayLines("2026-11-25", 10))
	before, _ := mustRead(t, e.dirs, Query{Limit: 500})
	pagedBefore, _ := mustRead(t, e.dirs, Query{After: before[3].Cursor, Limit: 12})

	if c, _, err := Maintain(e.dirs, ts("2026-11-25 12:00"), dayLen, 30*dayLen); c != 2 || err != nil {
		t.Fatalf("compressed %d, %v", c, err)
	}
	if _, err := os.Stat(e.livePath("2026-11-23")); !os.IsNotExist(err) {
		t.Fatalf("live file still there: %v", err)
	}
	after, _ := mustRead(t, e.dirs, Query{Limit: 500})
	if len(after) != len(before) {
		t.Fatalf("%d entries after, %d before", len(after), len(before))
	}
	for i := range before {
		if before[i] != after[i] {
			t.Errorf("entry %d: before %+v, after %+v", i, before[i], after[i])
		}
	}
	pagedAfter, _ := mustRead(t, e.dirs, Query{After: before[3].Cursor, Limit: 12})
	if !slices.Equal(pagedBefore, pagedAfter) {
		t.Errorf("paging from a compressed day:\n before %v\n after %v", messages(pagedBefore), messages(pagedAfter))
	}
}

func TestCompressWritesGzipOfFile(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "postgresql-2026-11-24.json")
	data := bytes.Repeat([]byte(dayLines("2026-11-24", 3)), 1000)
	os.WriteFile(src, data, 0o600)
	if err := compress(src, filepath.Join(dir, "a"), "x.json.gz"); err != nil {
		t.Fatal(err)
	}
	if got := gunzip(t, filepath.Join(dir, "a", "x.json.gz")); got != string(data) {
		t.Error("content differs")
	}
	if _, err := os.Stat(src); !os.IsNotExist(err) {
		t.Errorf("source still there: %v", err)
	}
	if got := names(t, filepath.Join(dir, "a")); !slices.Equal(got, []string{"x.json.gz"}) {
		t.Errorf("left %v", got)
	}
}
