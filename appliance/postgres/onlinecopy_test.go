package postgres

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance/daemon"
)

// copySource is a running instance holding what a copy must leave out: an unlogged table (only its init
// fork is copied), a temporary table (held by an open session), a replication slot of its own, temporary
// files, signal and backup files at the top, logs, pg_stat_tmp's files.
type copySource struct {
	inst    *Instance
	conn    *pgx.Conn // an admin session, kept
	tempRel string    // the temporary table's file, relative to the data directory
	unlRel  string    // the unlogged table's main fork
}

func newCopySource(t *testing.T, b *bundle) *copySource {
	t.Helper()
	inst := b.newInstance(t, "src", Settings{})
	conn := admin(t, inst)
	exec1(t, conn, "CREATE TABLE public.t AS SELECT g FROM generate_series(1, 100000) g")
	exec1(t, conn, "CREATE UNLOGGED TABLE public.u AS SELECT g FROM generate_series(1, 1000) g")
	exec1(t, conn, "SELECT pg_create_physical_replication_slot('kept', true)")
	holder := admin(t, inst) // its temporary table lives as long as the session
	exec1(t, holder, "CREATE TEMP TABLE tt AS SELECT g FROM generate_series(1, 1000) g")
	s := &copySource{inst: inst, conn: conn}
	if err := holder.QueryRow(t.Context(), "SELECT pg_relation_filepath('pg_temp.tt')").Scan(&s.tempRel); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(t.Context(), "SELECT pg_relation_filepath('public.u')").Scan(&s.unlRel); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"base/pgsql_tmp/pgsql_tmp99.0", "standby.signal", "backup_manifest", "tablespace_map", "pg_stat_tmp/planted"} {
		p := filepath.Join(inst.DataDir(), f)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("planted"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	exec1(t, conn, "CHECKPOINT")
	return s
}

// session opens an admin session for a copy (which closes it).
func (s *copySource) session(t *testing.T) *pgx.Conn {
	t.Helper()
	c, err := s.inst.ConnectWith(t.Context(), adminPassword, "postgres", map[string]string{"statement_timeout": "0"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// checkLeftAlone waits until the source has no replication slot but its own and no session but the
// test's two: a copy's backup ends with its session (a non-exclusive backup cannot outlive it).
func (s *copySource) checkLeftAlone(t *testing.T) {
	t.Helper()
	var slots []string
	var sessions int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		rows, err := s.conn.Query(t.Context(), "SELECT slot_name::text FROM pg_replication_slots ORDER BY 1")
		if err != nil {
			t.Fatal(err)
		}
		slots, err = pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		if err := s.conn.QueryRow(t.Context(), "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'").Scan(&sessions); err != nil {
			t.Fatal(err)
		}
		if strings.Join(slots, ",") == "kept" && sessions == 2 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the source keeps slots %v and %d sessions (want kept and 2)", slots, sessions)
		}
	}
}

// startCopy runs the copy in dir (<dir>/pgdata) as an instance, removed at the end of the test.
func startCopy(t *testing.T, b *bundle, dir string) *pgx.Conn {
	t.Helper()
	_, conn := startCopyInstance(t, b, dir)
	return conn
}

// startCopyInstance starts the copy in dir/pgdata as an instance, and opens an admin session to it.
func startCopyInstance(t *testing.T, b *bundle, dir string) (*Instance, *pgx.Conn) {
	t.Helper()
	inst := &Instance{ID: "copy", Dir: dir, ListenHost: "127.0.0.1", Bin: b.bin, User: b.user, Port: freePort(t)}
	certPEM, keyPEM, caPEM, err := b.ca.InstanceTLS("127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	if err := inst.WriteTLS(certPEM, keyPEM, caPEM); err != nil {
		t.Fatal(err)
	}
	if err := inst.MarkInitialized(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inst.Remove(context.Background()) })
	if err := inst.Start(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	return inst, admin(t, inst)
}

// TestOnlineCopy: a copy of a running instance starts and holds its data; what pg_basebackup leaves out,
// and the server's logs, are not in it; it belongs to the instances' OS user (directories 0700, files
// their source's mode); the source is left with no slot and no session of the copy's.
func TestOnlineCopy(t *testing.T) {
	b := setup(t)
	src := newCopySource(t, b)
	dir := filepath.Join(b.root, "copy")
	if err := b.user.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "pgdata")
	st, err := src.inst.OnlineCopy(t.Context(), src.session(t), dst, CopyOptions{Label: "test copy", Writeback: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", st)
	if st.Files < 500 || st.Bytes < 3<<20 || st.WALSegments < 1 {
		t.Fatalf("copied too little: %+v", st)
	}
	src.checkLeftAlone(t)

	for _, f := range []string{"postmaster.pid", "postmaster.opts", "standby.signal", "backup_manifest", "tablespace_map",
		"current_logfiles", "base/pgsql_tmp", "global/pg_internal.init", "pg_replslot/kept", "pg_stat_tmp/planted",
		src.unlRel, src.tempRel} {
		if _, err := os.Lstat(filepath.Join(src.inst.DataDir(), f)); err != nil {
			t.Errorf("the source has no %s: its absence from the copy proves nothing: %v", f, err)
		}
		if _, err := os.Lstat(filepath.Join(dst, f)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s was copied (%v)", f, err)
		}
	}
	for _, f := range []string{src.unlRel + "_init", "global/pg_control", "PG_VERSION", "postgresql.auto.conf"} {
		if _, err := os.Stat(filepath.Join(dst, f)); err != nil {
			t.Errorf("%s was not copied: %v", f, err)
		}
	}
	for _, d := range []string{"pg_stat_tmp", "pg_replslot", "pg_dynshmem", "pg_notify", "pg_serial", "pg_snapshots", "pg_subtrans", "log"} {
		if entries, err := os.ReadDir(filepath.Join(dst, d)); err != nil || len(entries) > 0 {
			t.Errorf("%s: %d entries, %v (want an empty directory)", d, len(entries), err)
		}
	}
	done, err := os.ReadDir(filepath.Join(dst, "pg_wal", "archive_status"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range done {
		if !strings.HasSuffix(e.Name(), ".done") {
			t.Errorf("pg_wal/archive_status holds %s", e.Name())
		}
	}
	if logs, _ := os.ReadDir(src.inst.LogDir()); len(logs) == 0 {
		t.Fatal("the source has no logs: the check above proves nothing")
	}
	wal, err := os.ReadDir(filepath.Join(dst, "pg_wal"))
	if err != nil {
		t.Fatal(err)
	}
	segments := 0
	for _, e := range wal {
		if walSegment.MatchString(e.Name()) {
			segments++
		}
	}
	if segments != st.WALSegments {
		t.Errorf("pg_wal holds %d segments, the copy says %d", segments, st.WALSegments)
	}
	label, err := os.ReadFile(filepath.Join(dst, "backup_label"))
	if err != nil || !strings.Contains(string(label), "LABEL: test copy\n") {
		t.Fatalf("backup_label: %q %v", label, err)
	}

	// Everything is the instances' user's.
	err = filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		sys := fi.Sys().(*syscall.Stat_t)
		if sys.Uid != b.user.UID || sys.Gid != b.user.GID {
			t.Errorf("%s belongs to %d:%d, not %s (%d:%d)", p, sys.Uid, sys.Gid, b.user.Name, b.user.UID, b.user.GID)
		}
		switch {
		case d.IsDir() && fi.Mode().Perm() != 0o700:
			t.Errorf("directory %s has mode %v", p, fi.Mode().Perm())
		case fi.Mode().IsRegular() && fi.Mode().Perm() != 0o600:
			t.Errorf("file %s has mode %v", p, fi.Mode().Perm())
		case !d.IsDir() && !fi.Mode().IsRegular():
			t.Errorf("%s is a %v", p, fi.Mode().Type())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// It starts, recovers, and holds the data (the unlogged table emptied, as after a crash).
	cp := startCopy(t, b, dir)
	var n, unlogged, slots int64
	if err := cp.QueryRow(t.Context(), "SELECT (SELECT count(*) FROM public.t), (SELECT count(*) FROM public.u), (SELECT count(*) FROM pg_replication_slots)").Scan(&n, &unlogged, &slots); err != nil {
		t.Fatal(err)
	}
	if n != 100000 || unlogged != 0 || slots != 0 {
		t.Fatalf("the copy holds %d rows, %d unlogged rows, %d slots; want 100000, 0, 0", n, unlogged, slots)
	}
}

// TestOnlineCopyFailures: a copy that fails after its backup started (a symbolic link in the data
// directory; its context cancelled mid-copy) removes what it copied and leaves the source with no slot and
// no session of its own; an existing destination is refused and left as it was.
func TestOnlineCopyFailures(t *testing.T) {
	b := setup(t)
	src := newCopySource(t, b)
	dst := filepath.Join(b.root, "copy")

	link := filepath.Join(src.inst.DataDir(), "base", "elsewhere")
	if err := os.Symlink("/etc", link); err != nil {
		t.Fatal(err)
	}
	_, err := src.inst.OnlineCopy(t.Context(), src.session(t), dst, CopyOptions{})
	if err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("a symbolic link in the data directory: %v", err)
	}
	if _, err := os.Lstat(dst); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the failed copy left %s: %v", dst, err)
	}
	src.checkLeftAlone(t)
	os.Remove(link)

	ctx, cancel := context.WithCancel(t.Context())
	go func() { // once the copy has begun copying files (its backup started before)
		defer cancel()
		daemon.WaitFor(ctx, time.Millisecond, func() (bool, error) {
			_, err := os.Stat(filepath.Join(dst, "global"))
			return err == nil, nil
		})
	}()
	st, err := src.inst.OnlineCopy(ctx, src.session(t), dst, CopyOptions{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("a copy cancelled mid-way: %v (%+v)", err, st)
	}
	if _, err := os.Lstat(dst); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the cancelled copy left %s: %v", dst, err)
	}
	src.checkLeftAlone(t)

	if err := os.Mkdir(dst, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, "mine"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := src.inst.OnlineCopy(t.Context(), src.session(t), dst, CopyOptions{}); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("a copy into an existing directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dst, "mine")); err != nil {
		t.Fatalf("the refused copy touched the existing directory: %v", err)
	}
	src.checkLeftAlone(t)
}

// TestCopyToleratesVanishedFiles: a file or directory removed between the listing and its copy is skipped.
func TestCopyToleratesVanishedFiles(t *testing.T) {
	t.Parallel()
	c, src, dst, jobs := planned(t, "base/1/100", "base/1/101", "global/1260", "PG_VERSION")
	if len(jobs) != 4 {
		t.Fatalf("planned %d files, want 4", len(jobs))
	}
	os.Remove(filepath.Join(src, "base/1/101"))
	if err := c.copyAll(jobs, 2); err != nil {
		t.Fatalf("a vanished file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dst, "base/1/100")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dst, "base/1/101")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the vanished file: %v", err)
	}
}

// TestCopyStaysInItsTrees: a directory of the source or of the copy swapped for a symbolic link while the
// copy runs (the instances' OS user owns both trees) makes the copy fail; it neither reads nor writes
// through the link.
func TestCopyStaysInItsTrees(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "100"), []byte("a secret of another tree"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, src, dst, jobs := planned(t, "base/1/100", "base/2/100")
	// After the walk: the source's base/1 now leads outside, and the copy's base/2 too.
	if err := os.RemoveAll(filepath.Join(src, "base/1")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(src, "base/1")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dst, "base/2")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dst, "base/2")); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if err := c.copyFile(j.src, j.dst, false); err == nil {
			t.Errorf("copied %s to %s through a symbolic link", j.src, j.dst)
		}
	}
	if b, err := os.ReadFile(filepath.Join(outside, "100")); err != nil || string(b) != "a secret of another tree" {
		t.Errorf("the file outside: %q, %v", b, err)
	}
	if _, err := os.Lstat(filepath.Join(dst, "base/1/100")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the copy holds the file read through the link: %v", err)
	}
}

// planned makes a source directory holding files (each containing its name) and an empty copy directory,
// and returns a copier between them (closed when the test ends) with its plan.
func planned(t *testing.T, files ...string) (c *copier, src, dst string, jobs []copyJob) {
	t.Helper()
	user, err := daemon.DefaultOSUser()
	if err != nil {
		t.Fatal(err)
	}
	src, dst = t.TempDir(), filepath.Join(t.TempDir(), "copy")
	for _, f := range files {
		os.MkdirAll(filepath.Dir(filepath.Join(src, f)), 0o700)
		if err := os.WriteFile(filepath.Join(src, f), []byte(f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(dst, 0o700); err != nil {
		t.Fatal(err)
	}
	if c, err = newCopier(t.Context(), user, src, dst, false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.close)
	if jobs, err = c.plan(src, dst); err != nil {
		t.Fatal(err)
	}
	return c, src, dst, jobs
}
