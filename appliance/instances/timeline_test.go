package instances

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/appliance/postgres/pgtest"
	"github.com/theappliance/appliance/store"
)

// archiveDir is an Archive's Archived over a directory archive (the default archive_command's).
func archiveDir(dir string) func(context.Context, string) (bool, error) {
	return func(_ context.Context, name string) (bool, error) {
		_, err := os.Stat(filepath.Join(dir, name))
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return err == nil, err
	}
}

// TestHistoryAbove: the archive holds a timeline above tl when it holds tl+1's history file (tl's own,
// a lower one or a segment of a higher timeline say nothing), hexadecimal as PostgreSQL names them.
func TestHistoryAbove(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"00000002.history", "00000003.history", "0000000A.history", "0000000C000000000000000A"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("1\t0/3000000\tno recovery target specified\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for tl, want := range map[int]bool{1: true, 2: true, 3: false, 9: true, 10: false, 11: false} {
		if got, err := HistoryAbove(t.Context(), archiveDir(dir), tl); err != nil || got != want {
			t.Errorf("HistoryAbove(%d) = %v, %v; want %v", tl, got, err, want)
		}
	}
	if _, err := HistoryAbove(t.Context(), archiveDir(dir), 0); err == nil {
		t.Error("HistoryAbove(0) succeeded")
	}
	failing := func(context.Context, string) (bool, error) { return false, errors.New("the bucket is unreachable") }
	if _, err := HistoryAbove(t.Context(), failing, 1); err == nil {
		t.Error("HistoryAbove with an unreachable archive succeeded")
	}
}

// TestParentTimeline reads a history file's last line.
func TestParentTimeline(t *testing.T) {
	parent, at, err := ParentTimeline([]byte("1\t0/3000000\tno recovery target specified\n\n2\t0/50000A0\tno recovery target specified\n"))
	if err != nil || parent != 2 || at != "0/50000A0" {
		t.Fatalf("ParentTimeline = %d, %q, %v; want 2, 0/50000A0", parent, at, err)
	}
	if _, _, err := ParentTimeline([]byte("# nothing\n")); err == nil {
		t.Fatal("a history file without a parent was read")
	}
}

// TestNewTimeline, against a real server archiving into a directory: stopped, with the history file of
// the timeline above its own in the archive (a branch another copy promoted to), it moves itself to the
// next free timeline (3), whose history names its own (1) at its end; it runs, out of recovery, with
// every row, no recovery settings left, and archives the new history file. A recovery of a base backup
// of before, to the archive's latest timeline, then reaches the rows written after. Stopped again, with no
// timeline above its own in the archive, it is left alone (not started); with a placeholder of the next
// one archived (PlaceholderHistory), it moves above it, and a recovery to the latest timeline follows.
func TestNewTimeline(t *testing.T) {
	t.Parallel()
	srv := pgtest.Start(t, postgres.Settings{})
	ctx := t.Context()
	m := New(Config{User: srv.Instance.User, Bin: srv.Instance.Bin, ListenHost: "127.0.0.1", Dir: filepath.Dir(srv.Instance.Dir)})
	inst := &store.Instance{ID: srv.Instance.ID, Dir: srv.Instance.Dir, Port: srv.Instance.Port}
	archive := srv.Instance.ArchiveDir()
	archived := archiveDir(archive)
	restore := fmt.Sprintf("cp %q %q", filepath.Join(archive, "%f"), "%p")

	// Two base backups of before (fetched now, each recovered to the archive's latest timeline later).
	var bases []string
	for i := range 2 {
		baseDir := filepath.Join(filepath.Dir(srv.Instance.Dir), fmt.Sprintf("%s-base%d", inst.ID, i))
		if err := srv.Instance.User.Mkdir(baseDir, 0o700); err != nil {
			t.Fatal(err)
		}
		bases = append(bases, filepath.Join(baseDir, "pgdata"))
		if err := basebackupFetch(t, srv, nil)(ctx, nil, bases[i]); err != nil {
			t.Fatal(err)
		}
	}
	// rowsAtLatest recovers a base backup of before to the archive's end on its latest timeline (as a
	// move's staged standby or a restore elsewhere does) and counts the rows there.
	rowsAtLatest := func(name, base string) int {
		t.Helper()
		port, err := postgres.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		cand := &postgres.Instance{ID: inst.ID + "-" + name, Dir: filepath.Join(filepath.Dir(srv.Instance.Dir), inst.ID+"-"+name),
			ListenHost: "127.0.0.1", Port: port, Bin: srv.Instance.Bin, User: srv.Instance.User}
		err = m.prepareCandidate(ctx, nil, srv.Instance, cand, func(_ context.Context, _ daemon.ExecFunc, dataDir string) error {
			return os.Rename(base, dataDir)
		})
		if err != nil {
			t.Fatal(err)
		}
		checkAuto := cand.DataDir() + "/postgresql.auto.conf"
		orig, _ := os.ReadFile(checkAuto)
		conf := append(append(orig, recoveryMarker...), recoveryConf("job_"+name, restore, Target{End: true})...)
		conf = append(conf, "archive_mode = off\n"...)
		if err := m.writeUserFile(checkAuto, conf); err != nil {
			t.Fatal(err)
		}
		if err := m.writeUserFile(cand.DataDir()+"/recovery.signal", nil); err != nil {
			t.Fatal(err)
		}
		since := time.Now()
		if err := startScratch(ctx, nil, cand); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cand.Stop(context.Background(), nil, daemon.StopImmediate) }()
		if err := m.finishRecovery(ctx, cand, pgtest.AdminPassword, since); err != nil {
			t.Fatal(err)
		}
		cc, err := cand.Admin(ctx, pgtest.AdminPassword)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close(context.Background())
		var n int
		if err := cc.QueryRow(ctx, "SELECT count(*) FROM public.written").Scan(&n); err != nil {
			ls, _ := os.ReadDir(archive)
			var names []string
			for _, e := range ls {
				names = append(names, e.Name())
			}
			t.Fatalf("%s: %v\narchive: %v\n%s", name, err, names, strings.Join(cand.LogMessages(since, 60), "\n"))
		}
		return n
	}
	admin := srv.Admin(t, "postgres")
	if _, err := admin.Exec(ctx, "CREATE TABLE public.written (n int); INSERT INTO public.written SELECT generate_series(1, 100)"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ArchiveNow(ctx, inst, pgtest.AdminPassword, archived); err != nil {
		t.Fatal(err)
	}
	admin.Close(ctx)
	if err := srv.Instance.Stop(ctx, nil, daemon.StopFast); err != nil {
		t.Fatal(err)
	}
	// What a copy promoted elsewhere archives: timeline 2's history, branched off 1.
	if err := m.writeUserFile(filepath.Join(archive, "00000002.history"), []byte("1\t0/3000000\tno recovery target specified\n")); err != nil {
		t.Fatal(err)
	}
	b, moved, err := m.NewTimeline(ctx, nil, inst, pgtest.AdminPassword, restore, "job_tl", archived)
	if err != nil || !moved {
		t.Fatalf("NewTimeline: moved %v, %v", moved, err)
	}
	if b.From != 1 || b.To != 3 || b.At == "" {
		t.Fatalf("NewTimeline moved from %d to %d at %q; want 1 to 3", b.From, b.To, b.At)
	}
	conn := srv.Admin(t, "postgres")
	var inRecovery bool
	var n int
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery(), (SELECT count(*) FROM public.written)").Scan(&inRecovery, &n); err != nil {
		t.Fatal(err)
	}
	if inRecovery || n != 100 {
		t.Fatalf("after NewTimeline: in recovery %v, %d rows; want out of recovery, 100 rows", inRecovery, n)
	}
	auto, _ := os.ReadFile(filepath.Join(srv.Instance.DataDir(), "postgresql.auto.conf"))
	if strings.Contains(string(auto), recoveryMarker) || strings.Contains(string(auto), "restore_command") {
		t.Fatalf("recovery settings left in postgresql.auto.conf:\n%s", auto)
	}
	pgtest.WaitFor(t, time.Minute, func() (bool, string) {
		data, err := os.ReadFile(filepath.Join(archive, "00000003.history"))
		if err != nil {
			return false, err.Error()
		}
		parent, at, err := ParentTimeline(data)
		return err == nil && parent == 1 && at == b.At, fmt.Sprintf("%d %s %v", parent, at, err)
	})
	if _, err := conn.Exec(ctx, "INSERT INTO public.written SELECT generate_series(101, 150)"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	if _, _, err := ArchiveNow(ctx, inst, pgtest.AdminPassword, archived); err != nil {
		t.Fatal(err)
	}

	// The base backup of before, recovered to the archive's end on its latest timeline, has every row.
	if n := rowsAtLatest("check1", bases[0]); n != 150 {
		t.Fatalf("the base backup of before recovered to the archive's latest timeline: %d rows, want 150", n)
	}

	// No timeline above its own: left alone.
	if err := srv.Instance.Stop(ctx, nil, daemon.StopFast); err != nil {
		t.Fatal(err)
	}
	if _, moved, err := m.NewTimeline(ctx, nil, inst, pgtest.AdminPassword, restore, "job_tl2", archived); err != nil || moved {
		t.Fatalf("NewTimeline with no timeline above: moved %v, %v", moved, err)
	}
	if _, running, _ := srv.Instance.Status(); running {
		t.Fatal("NewTimeline started a server it did not move")
	}

	// Another copy may have promoted to the next timeline (4) with its history file not archived yet: a
	// placeholder of it archived, the server moves above it (5, branched off 3); a recovery to the latest
	// timeline follows 1, 3, 5 (PostgreSQL stops at the first timeline without a history file: without the
	// placeholder it would stay on 3).
	_, at, err := StoppedTimeline(ctx, srv.Instance)
	if err != nil {
		t.Fatal(err)
	}
	ph, err := PlaceholderHistory(srv.Instance, 3, at, "placeholder:\tjob_tl3")
	if err != nil {
		t.Fatal(err)
	}
	if want := "1\t" + b.At + "\t"; !strings.HasPrefix(string(ph), want) || !strings.HasSuffix(string(ph), "\n3\t"+at+"\tplaceholder: job_tl3\n") {
		t.Fatalf("placeholder history:\n%s", ph)
	}
	if err := m.writeUserFile(filepath.Join(archive, "00000004.history"), ph); err != nil {
		t.Fatal(err)
	}
	b, moved, err = m.NewTimeline(ctx, nil, inst, pgtest.AdminPassword, restore, "job_tl3", archived)
	if err != nil || !moved || b.From != 3 || b.To != 5 {
		t.Fatalf("NewTimeline above a placeholder: moved %v from %d to %d, %v; want 3 to 5", moved, b.From, b.To, err)
	}
	conn = srv.Admin(t, "postgres")
	if _, err := conn.Exec(ctx, "INSERT INTO public.written SELECT generate_series(151, 170)"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	if _, _, err := ArchiveNow(ctx, inst, pgtest.AdminPassword, archived); err != nil {
		t.Fatal(err)
	}
	if n := rowsAtLatest("check2", bases[1]); n != 170 {
		t.Fatalf("the base backup of before recovered to the archive's latest timeline, above the placeholder: %d rows, want 170", n)
	}
}
