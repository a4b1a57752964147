package appliance_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/instances"
	"github.com/theappliance/appliance/appliance/previews"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

func waitPreview(t *testing.T, e interface {
	WaitJob(testing.TB, string) *store.Job
}, res *appliance.PreviewJobResponse, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if j := e.WaitJob(t, res.Job.ID); j.State != scheduler.StateCompleted {
		t.Fatalf("%s: %s\n%s", j.Type, j.Error, j.LastStderr)
	}
}

// TestPreviewsCloneEmptyExpireAndGoWithTheirProject: a clone holds the project's rows as of its making and
// is independent afterwards, with its own credential; an empty preview has the names and no data;
// previews are not projects; their TTL is extended or expires (injected clock); deleting the project
// deletes its previews.
func TestPreviewsCloneEmptyExpireAndGoWithTheirProject(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	now := time.Now()
	e.Clock.Set(func() time.Time { return now })
	prj, pc, parent := connected(t, e, p, "shop")
	if _, err := parent.Exec(t.Context(), "CREATE TABLE orders (id int PRIMARY KEY, note text); INSERT INTO orders SELECT g, 'before' FROM generate_series(1, 100) g"); err != nil {
		t.Fatal(err)
	}

	clone, err := e.Svc.Previews().Create(t.Context(), p, prj.ID, &appliance.CreatePreviewRequest{Name: "feature-x"})
	waitPreview(t, e, clone, err)
	if clone.Preview.Mode != previews.ModeClone || clone.Preview.ProjectID != prj.ID || clone.Preview.DatabaseName != prj.DatabaseName {
		t.Fatalf("clone: %+v", clone.Preview)
	}
	cc, err := e.Svc.Previews().Connections(t.Context(), p, clone.Preview.ID)
	if err != nil {
		t.Fatal(err)
	}
	if cc.Connections.DirectURL == pc.Connections.DirectURL {
		t.Fatal("the clone has the project's URL")
	}
	copyConn := connect(t, cc.Connections.DirectURL)
	if n := scalar[int64](t, copyConn, "SELECT count(*) FROM orders"); n != 100 {
		t.Fatalf("the clone holds %d rows, want 100", n)
	}
	// Independent: writes on either side are unseen by the other.
	if _, err := copyConn.Exec(t.Context(), "INSERT INTO orders VALUES (1000, 'preview only')"); err != nil {
		t.Fatal(err)
	}
	if _, err := parent.Exec(t.Context(), "INSERT INTO orders VALUES (2000, 'project only')"); err != nil {
		t.Fatal(err)
	}
	if n := scalar[int64](t, parent, "SELECT count(*) FROM orders WHERE id = 1000"); n != 0 {
		t.Fatal("the project sees the preview's write")
	}
	if n := scalar[int64](t, copyConn, "SELECT count(*) FROM orders WHERE id = 2000"); n != 0 {
		t.Fatal("the preview sees the project's later write")
	}
	// A preview keeps no WAL: its segments are "archived" by discarding them, none piles up in its directory.
	for range 2 {
		if err := e.AdminExec(t, clone.Preview.ID, "SELECT pg_switch_wal() FROM (SELECT txid_current()) AS write_something"); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(time.Minute); scalar[int64](t, copyConn, "SELECT archived_count FROM pg_stat_archiver") < 1; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the preview archived nothing")
		}
	}
	if n := scalar[int64](t, copyConn, "SELECT failed_count FROM pg_stat_archiver"); n != 0 {
		t.Fatalf("the preview's archiver failed %d times", n)
	}
	if kept, _ := filepath.Glob(filepath.Join(instanceOf(t, e, e.Project(t, clone.Preview.ID)).Dir, "wal-archive", "*")); len(kept) > 0 {
		t.Fatalf("the preview archived %d WAL segments into its directory", len(kept))
	}
	// Its own credential: the project's password does not open the preview.
	pcfg, _ := pgx.ParseConfig(pc.Connections.DirectURL)
	ccfg, _ := pgx.ParseConfig(cc.Connections.DirectURL)
	pcfg.Port = ccfg.Port
	if c, err := pgx.ConnectConfig(t.Context(), pcfg); err == nil {
		c.Close(t.Context())
		t.Fatal("the project's password opens the clone")
	}

	// A reset makes the clone again from the project as of now: its own write is gone, the project's later
	// one is there, and the same URL works.
	rs, err := e.Svc.Previews().Reset(t.Context(), p, clone.Preview.ID)
	runJob(t, e, rs, err)
	again := connect(t, cc.Connections.DirectURL)
	if n := scalar[int64](t, again, "SELECT count(*) FROM orders WHERE id = 1000"); n != 0 {
		t.Fatal("the preview's write survived its reset")
	}
	if n := scalar[int64](t, again, "SELECT count(*) FROM orders WHERE id = 2000"); n != 1 {
		t.Fatal("the reset clone lacks the project's later write")
	}

	empty, err := e.Svc.Previews().Create(t.Context(), p, prj.ID, &appliance.CreatePreviewRequest{Mode: previews.ModeEmpty, TTLHours: ptr(2)})
	waitPreview(t, e, empty, err)
	ec, err := e.Svc.Previews().Connections(t.Context(), p, empty.Preview.ID)
	if err != nil {
		t.Fatal(err)
	}
	if n := scalar[int64](t, connect(t, ec.Connections.DirectURL), "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"); n != 0 {
		t.Fatalf("the empty preview has %d tables", n)
	}

	// Previews are not projects.
	list, err := e.Svc.ListProjects(t.Context(), p, "")
	if err != nil || len(list.Projects) != 1 {
		t.Fatalf("projects: %d, %v", len(list.Projects), err)
	}
	if _, err := e.Svc.GetProject(t.Context(), p, clone.Preview.ID); err == nil {
		t.Fatal("a preview is reachable as a project")
	}
	prvs, err := e.Svc.Previews().List(t.Context(), p, prj.ID)
	if err != nil || len(prvs.PreviewDatabases) != 2 {
		t.Fatalf("previews: %+v %v", prvs, err)
	}
	// Bad input.
	_, err = e.Svc.Previews().Create(t.Context(), p, prj.ID, &appliance.CreatePreviewRequest{Mode: "fork"})
	wantKind(t, err, appliance.KindInvalid)
	_, err = e.Svc.Previews().Create(t.Context(), p, prj.ID, &appliance.CreatePreviewRequest{TTLHours: ptr(0)})
	wantKind(t, err, appliance.KindInvalid)
	_, err = e.Svc.Previews().Extend(t.Context(), p, clone.Preview.ID, &appliance.ExtendPreviewRequest{TTLHours: 721})
	wantKind(t, err, appliance.KindInvalid)
	_, err = e.Svc.Previews().Create(t.Context(), p, prj.ID, &appliance.CreatePreviewRequest{})
	wantKind(t, err, appliance.KindForbidden) // the free plan's 2 previews

	// The clone is extended to 48 hours; 3 hours later the empty one (2 hours) expires.
	ext, err := e.Svc.Previews().Extend(t.Context(), p, clone.Preview.ID, &appliance.ExtendPreviewRequest{TTLHours: 48})
	if err != nil || !ext.Preview.TTLExpiresAt.Equal(now.Add(48*time.Hour)) {
		t.Fatalf("extend: %+v %v", ext, err)
	}
	emptyInst := e.Project(t, empty.Preview.ID).PrimaryInstanceID
	now = now.Add(3 * time.Hour)
	if n, err := e.Svc.Previews().Sweep(t.Context()); err != nil || n != 1 {
		t.Fatalf("sweep: %d %v", n, err)
	}
	if j := e.WaitJob(t, e.Project(t, empty.Preview.ID).LatestJobID); j.Type != previews.JobDelete || j.State != scheduler.StateCompleted {
		t.Fatalf("expiry job: %s %s %s", j.Type, j.State, j.Error)
	}
	if left := processesUnder(filepath.Join(e.Dir, "instances", emptyInst)); len(left) > 0 {
		t.Fatalf("the expired preview's processes still run: %v", left)
	}
	if prvs, _ := e.Svc.Previews().List(t.Context(), p, prj.ID); len(prvs.PreviewDatabases) != 1 {
		t.Fatalf("after the expiry: %d previews", len(prvs.PreviewDatabases))
	}

	// Deleting the project deletes its previews.
	cloneInst := e.Project(t, clone.Preview.ID).PrimaryInstanceID
	res, err := e.Svc.DeleteProject(t.Context(), p, prj.ID, "")
	runJob(t, e, res, err)
	if got := e.Project(t, clone.Preview.ID); got.State != appliance.ProjectDeleted {
		t.Fatalf("the clone after its project's deletion: %s", got.State)
	}
	if left := processesUnder(filepath.Join(e.Dir, "instances", cloneInst)); len(left) > 0 {
		t.Fatalf("the clone's processes outlived its project: %v", left)
	}
}

// TestPreviewAsOfAPastTime: a clone made with source_restore_time holds the project's rows as they were
// then (recovered from a base backup and the WAL archive); a time before any backup is refused.
func TestPreviewAsOfAPastTime(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	prj, _, conn := connected(t, e, p, "history")
	before := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	if _, err := conn.Exec(t.Context(), "CREATE TABLE events (id int); INSERT INTO events SELECT generate_series(1, 10)"); err != nil {
		t.Fatal(err)
	}
	b, err := e.Svc.Backups().Create(t.Context(), p, prj.ID, &appliance.CreateBackupRequest{Label: "base"})
	runJob(t, e, b, err)
	if _, err := conn.Exec(t.Context(), "INSERT INTO events SELECT generate_series(11, 20)"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // commit timestamps on either side of the target
	target := time.Now().UTC()
	time.Sleep(1100 * time.Millisecond)
	if _, err := conn.Exec(t.Context(), "INSERT INTO events SELECT generate_series(21, 30)"); err != nil {
		t.Fatal(err)
	}

	_, err = e.Svc.Previews().Create(t.Context(), p, prj.ID, &appliance.CreatePreviewRequest{SourceRestoreTime: before})
	wantKind(t, err, appliance.KindInvalid)
	_, err = e.Svc.Previews().Create(t.Context(), p, prj.ID, &appliance.CreatePreviewRequest{Mode: previews.ModeEmpty, SourceRestoreTime: target.Format(time.RFC3339Nano)})
	wantKind(t, err, appliance.KindInvalid)
	res, err := e.Svc.Previews().Create(t.Context(), p, prj.ID, &appliance.CreatePreviewRequest{Name: "as-of", SourceRestoreTime: target.Format(time.RFC3339Nano)})
	waitPreview(t, e, res, err)
	if res.Preview.SourceKind != previews.SourceBackup || res.Preview.SourceBackupKey == "" || !res.Preview.SourceRestoreTime.Equal(target) {
		t.Fatalf("preview: %+v", res.Preview)
	}
	cc, err := e.Svc.Previews().Connections(t.Context(), p, res.Preview.ID)
	if err != nil {
		t.Fatal(err)
	}
	prv := connect(t, cc.Connections.DirectURL)
	if n := scalar[int64](t, prv, "SELECT count(*) FROM events"); n != 20 {
		t.Fatalf("the preview as of the target holds %d rows, want 20", n)
	}
	if _, err := prv.Exec(t.Context(), "INSERT INTO events VALUES (100)"); err != nil {
		t.Fatalf("the recovered preview does not take writes: %v", err)
	}
	// A reset recovers to the same time again.
	rs, err := e.Svc.Previews().Reset(t.Context(), p, res.Preview.ID)
	runJob(t, e, rs, err)
	if n := scalar[int64](t, connect(t, cc.Connections.DirectURL), "SELECT count(*) FROM events"); n != 20 {
		t.Fatalf("after the reset: %d rows, want 20", n)
	}
}

// TestCloneUnderWritesIsConsistent: a clone made while a writer commits without pause (a counter and a log
// row in one transaction each time, with checkpoints in between) holds a state in which the two agree, no
// older than the moment it was asked for, and is independent afterwards; the project is left with no
// replication slot and no session of the copy. A clone whose copy fails (a symbolic link planted in the
// project's data directory) fails with no data directory left, and the project runs on, as clean.
func TestCloneUnderWritesIsConsistent(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	prj, pc, parent := connected(t, e, p, "busy")
	if _, err := parent.Exec(t.Context(), `CREATE TABLE counter (id int PRIMARY KEY, n bigint NOT NULL);
		INSERT INTO counter VALUES (1, 0);
		CREATE TABLE log (n bigint PRIMARY KEY, pad text);
		CREATE TABLE bulk AS SELECT g, repeat(md5(g::text), 10) AS pad FROM generate_series(1, 200000) g`); err != nil {
		t.Fatal(err)
	}
	admin := func() *pgx.Conn {
		conn, err := pgx.ConnectConfig(t.Context(), e.AdminConfig(t, prj.ID))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close(context.Background()) })
		return conn
	}
	// checkClean waits until the project has no replication slot and no session of a copy.
	checkClean := func() {
		t.Helper()
		conn := admin()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			slots := scalar[int64](t, conn, "SELECT count(*) FROM pg_replication_slots")
			copies := scalar[int64](t, conn, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", instances.CopySessionName)
			if slots == 0 && copies == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the project keeps %d replication slots and %d sessions of a copy", slots, copies)
			}
		}
	}

	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	var committed atomic.Int64
	var stopWriting atomic.Bool // the writer ends between transactions: one cancelled in its COMMIT could
	// commit on the server while the writer counts it failed
	wcfg, err := pgx.ParseConfig(pc.Connections.DirectURL)
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { // the writer: the counter and its log row, one transaction each time
		wctx := t.Context()
		conn, err := pgx.ConnectConfig(wctx, wcfg)
		if err != nil {
			errs <- err
			return
		}
		defer conn.Close(context.Background())
		for !stopWriting.Load() {
			err := pgx.BeginFunc(wctx, conn, func(tx pgx.Tx) error {
				var n int64
				if err := tx.QueryRow(wctx, "UPDATE counter SET n = n + 1 WHERE id = 1 RETURNING n").Scan(&n); err != nil {
					return err
				}
				_, err := tx.Exec(wctx, "INSERT INTO log VALUES ($1, repeat('x', 500))", n)
				return err
			})
			if err != nil {
				errs <- err
				return
			}
			committed.Add(1)
		}
	})
	checkpointer := admin()
	wg.Go(func() { // checkpoints while the copy runs: the backup's own checkpoint must be where recovery starts
		for ctx.Err() == nil {
			if _, err := checkpointer.Exec(ctx, "CHECKPOINT"); err != nil && ctx.Err() == nil {
				errs <- err
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	for committed.Load() < 50 {
		time.Sleep(10 * time.Millisecond)
	}
	asked := committed.Load()
	res, err := e.Svc.Previews().Create(t.Context(), p, prj.ID, &appliance.CreatePreviewRequest{Name: "busy-clone"})
	waitPreview(t, e, res, err)
	during := committed.Load() - asked
	stopWriting.Store(true)
	stop()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("writer or checkpointer: %v", err)
	}
	total := committed.Load()

	cc, err := e.Svc.Previews().Connections(t.Context(), p, res.Preview.ID)
	if err != nil {
		t.Fatal(err)
	}
	clone := connect(t, cc.Connections.DirectURL)
	n := scalar[int64](t, clone, "SELECT n FROM counter")
	var rows, first, last int64
	if err := clone.QueryRow(t.Context(), "SELECT count(*), coalesce(min(n), 0), coalesce(max(n), 0) FROM log").Scan(&rows, &first, &last); err != nil {
		t.Fatal(err)
	}
	t.Logf("writer: %d commits before the clone was asked for, %d while it was made, %d in all; the clone holds %d", asked, during, total, n)
	if rows != n || last != n || (n > 0 && first != 1) {
		t.Fatalf("the clone is not consistent: counter %d, log rows %d (from %d to %d)", n, rows, first, last)
	}
	if n < asked || n >= total {
		t.Fatalf("the clone holds the counter at %d: want it between %d (when asked) and %d (the writer's last)", n, asked, total)
	}
	if scalar[int64](t, clone, "SELECT count(*) FROM bulk") != 200000 {
		t.Fatal("the clone lacks rows of bulk")
	}
	// Independent afterwards.
	if _, err := clone.Exec(t.Context(), "UPDATE counter SET n = -1"); err != nil {
		t.Fatal(err)
	}
	if _, err := parent.Exec(t.Context(), "INSERT INTO log VALUES (-2, 'project only')"); err != nil {
		t.Fatal(err)
	}
	if got := scalar[int64](t, parent, "SELECT n FROM counter"); got != total {
		t.Fatalf("the project's counter is %d, want %d", got, total)
	}
	if scalar[int64](t, clone, "SELECT count(*) FROM log WHERE n = -2") != 0 {
		t.Fatal("the clone sees the project's later write")
	}
	checkClean()

	// A copy that fails (a symbolic link in the data directory is refused, after the backup started).
	link := filepath.Join(instanceOf(t, e, prj).Dir, "pgdata", "base", "elsewhere")
	if err := os.Symlink("/etc", link); err != nil {
		t.Fatal(err)
	}
	bad, err := e.Svc.Previews().Create(t.Context(), p, prj.ID, &appliance.CreatePreviewRequest{Name: "refused"})
	if err != nil {
		t.Fatal(err)
	}
	if j := e.WaitJob(t, bad.Job.ID); j.State != scheduler.StateFailed || !strings.Contains(j.Error, "symbolic link") {
		t.Fatalf("a clone of a data directory with a symbolic link: %s %s", j.State, j.Error)
	}
	os.Remove(link)
	if got := e.Project(t, bad.Preview.ID); got.State != appliance.ProjectFailed {
		t.Fatalf("the failed clone is %s", got.State)
	} else if _, err := os.Stat(filepath.Join(e.Dir, "instances", got.PrimaryInstanceID, "pgdata")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the failed clone left its data directory: %v", err)
	}
	checkClean()
	if got := scalar[int64](t, parent, "SELECT count(*) FROM log WHERE n = -2"); got != 1 {
		t.Fatal("the project lost a write")
	}
}

// TestPreviewAsOfARestorePoint: a clone as of a named restore point holds the rows committed before the
// point and none after; the point's id and label are on the preview; another project's point, an unknown
// one, one with mode empty or with a time as well are refused (400) and make nothing.
func TestPreviewAsOfARestorePoint(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	prj, _, conn := connected(t, e, p, "pointed")
	if _, err := conn.Exec(t.Context(), "CREATE TABLE events (id int); INSERT INTO events SELECT generate_series(1, 10)"); err != nil {
		t.Fatal(err)
	}
	b, err := e.Svc.Backups().Create(t.Context(), p, prj.ID, &appliance.CreateBackupRequest{Label: "base"})
	runJob(t, e, b, err)
	if _, err := conn.Exec(t.Context(), "INSERT INTO events SELECT generate_series(11, 20)"); err != nil {
		t.Fatal(err)
	}
	rp, err := e.Svc.Backups().CreateRestorePoint(t.Context(), p, prj.ID, &appliance.RestorePointRequest{Label: "before the migration"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(t.Context(), "INSERT INTO events SELECT generate_series(21, 30); CREATE TABLE later (id int)"); err != nil {
		t.Fatal(err)
	}

	for name, req := range map[string]appliance.CreatePreviewRequest{
		"unknown":    {SourceRestorePointID: "rp_unknown"},
		"empty mode": {Mode: previews.ModeEmpty, SourceRestorePointID: rp.RestorePoint.ID},
		"and a time": {SourceRestorePointID: rp.RestorePoint.ID, SourceRestoreTime: time.Now().UTC().Format(time.RFC3339)},
	} {
		_, err := e.Svc.Previews().Create(t.Context(), p, prj.ID, &req)
		t.Log(name)
		wantKind(t, err, appliance.KindInvalid)
	}
	other := provision(t, e, p, "other", "development")
	_, err = e.Svc.Previews().Create(t.Context(), p, other.ID, &appliance.CreatePreviewRequest{SourceRestorePointID: rp.RestorePoint.ID})
	wantKind(t, err, appliance.KindInvalid)
	if l, err := e.Svc.Previews().List(t.Context(), p, prj.ID); err != nil || len(l.PreviewDatabases) != 0 {
		t.Fatalf("refused creations left previews: %+v %v", l, err)
	}

	res, err := e.Svc.Previews().Create(t.Context(), p, prj.ID, &appliance.CreatePreviewRequest{Name: "at-point", SourceRestorePointID: rp.RestorePoint.ID})
	waitPreview(t, e, res, err)
	if res.Preview.SourceKind != previews.SourceBackup || res.Preview.SourceRestorePointID != rp.RestorePoint.ID ||
		res.Preview.SourceRestorePointLabel != "before the migration" || res.Preview.SourceRestoreTime == nil {
		t.Fatalf("preview: %+v", res.Preview)
	}
	cc, err := e.Svc.Previews().Connections(t.Context(), p, res.Preview.ID)
	if err != nil {
		t.Fatal(err)
	}
	prv := connect(t, cc.Connections.DirectURL)
	if n := scalar[int64](t, prv, "SELECT count(*) FROM events"); n != 20 {
		t.Fatalf("the preview as of the restore point holds %d rows, want 20", n)
	}
	if n := scalar[int64](t, prv, "SELECT count(*) FROM pg_tables WHERE tablename = 'later'"); n != 0 {
		t.Fatal("the preview holds a table made after the restore point")
	}
	if _, err := prv.Exec(t.Context(), "INSERT INTO events VALUES (100)"); err != nil {
		t.Fatalf("the recovered preview does not take writes: %v", err)
	}
}

// TestPreviewSchemaDiff: a fresh clone's schema equals its project's; after a column, an index and a table
// are added in the preview and a view dropped, the diff lists exactly those, in a fixed order (the new
// table's own columns and constraints not again); a change of a column's default shows both sides; an
// open cutover request of the preview links to the diff.
func TestPreviewSchemaDiff(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	prj, _, conn := connected(t, e, p, "diffed")
	if _, err := conn.Exec(t.Context(), `CREATE TABLE orders (id bigint PRIMARY KEY, total numeric NOT NULL DEFAULT 0);
		CREATE VIEW big_orders AS SELECT id FROM orders WHERE total > 100;
		CREATE FUNCTION twice(int) RETURNS int LANGUAGE sql AS 'SELECT $1 * 2';
		CREATE TYPE mood AS ENUM ('sad', 'ok');
		CREATE SEQUENCE invoice_no;
		CREATE FUNCTION touch() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END';
		CREATE TRIGGER orders_touch BEFORE UPDATE ON orders FOR EACH ROW EXECUTE FUNCTION touch();
		CREATE POLICY own_rows ON orders USING (total >= 0);
		GRANT SELECT ON orders TO PUBLIC`); err != nil {
		t.Fatal(err)
	}
	res, err := e.Svc.Previews().Create(t.Context(), p, prj.ID, &appliance.CreatePreviewRequest{Name: "next"})
	waitPreview(t, e, res, err)
	d, err := e.Svc.Previews().SchemaDiff(t.Context(), p, res.Preview.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d.Total != 0 || len(d.Changes) != 0 || d.Database != prj.DatabaseName {
		t.Fatalf("a fresh clone differs: %+v", d)
	}
	cc, err := e.Svc.Previews().Connections(t.Context(), p, res.Preview.ID)
	if err != nil {
		t.Fatal(err)
	}
	prv := connect(t, cc.Connections.DirectURL)
	if _, err := prv.Exec(t.Context(), `ALTER TABLE orders ADD COLUMN note text;
		CREATE INDEX orders_total ON orders (total);
		CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL);
		DROP VIEW big_orders`); err != nil {
		t.Fatal(err)
	}
	d, err = e.Svc.Previews().SchemaDiff(t.Context(), p, res.Preview.ID)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range d.Changes {
		got = append(got, c.Kind+" "+c.Change+" "+c.Schema+"."+c.Name+" ["+c.Before+"|"+c.After+"]")
	}
	want := []string{
		"table added public.customers [|table]",
		"column added public.orders.note [|text NULL]",
		"index added public.orders_total [|CREATE INDEX orders_total ON public.orders USING btree (total)]",
	}
	if len(d.Changes) != 4 || d.Total != 4 || d.Truncated || strings.Join(got[:3], "\n") != strings.Join(want, "\n") ||
		!strings.HasPrefix(got[3], "view removed public.big_orders [") || d.Changes[3].After != "" || !strings.Contains(d.Changes[3].Before, "total > ") {
		t.Fatalf("diff:\n%s", strings.Join(got, "\n"))
	}

	if _, err := prv.Exec(t.Context(), `ALTER TABLE orders ALTER COLUMN total SET DEFAULT 1`); err != nil {
		t.Fatal(err)
	}
	d, err = e.Svc.Previews().SchemaDiff(t.Context(), p, res.Preview.ID)
	if err != nil {
		t.Fatal(err)
	}
	var changed *appliance.SchemaChange
	for _, c := range d.Changes {
		if c.Change == "changed" {
			changed = c
		}
	}
	if d.Total != 5 || changed == nil || changed.Name != "orders.total" || changed.Before != "numeric NOT NULL DEFAULT 0" || changed.After != "numeric NOT NULL DEFAULT 1" {
		t.Fatalf("changed default: %+v %+v", d, changed)
	}

	// Sequences, types (enum, composite, domain), triggers, row level security and its policies, grants.
	if _, err := prv.Exec(t.Context(), `ALTER TYPE mood ADD VALUE 'happy';
		CREATE TYPE pair AS (a int, b text);
		CREATE DOMAIN positive AS int NOT NULL CHECK (VALUE > 0);
		ALTER SEQUENCE invoice_no INCREMENT 10;
		CREATE SEQUENCE ticket_no;
		DROP TRIGGER orders_touch ON orders;
		ALTER TABLE orders ENABLE ROW LEVEL SECURITY;
		CREATE POLICY big ON orders FOR SELECT TO PUBLIC USING (total > 100);
		GRANT INSERT ON orders TO PUBLIC;
		GRANT USAGE ON SEQUENCE ticket_no TO PUBLIC`); err != nil {
		t.Fatal(err)
	}
	d, err = e.Svc.Previews().SchemaDiff(t.Context(), p, res.Preview.ID)
	if err != nil {
		t.Fatal(err)
	}
	got = nil
	for _, c := range d.Changes {
		if !slices.Contains([]string{"extension", "column", "index", "view", "function"}, c.Kind) && c.Name != "customers" {
			got = append(got, c.Kind+" "+c.Change+" "+c.Schema+"."+c.Name+" ["+c.Before+"|"+c.After+"]")
		}
	}
	seq := func(inc int) string {
		return fmt.Sprintf("bigint start 1 increment %d min 1 max 9223372036854775807 cache 1", inc)
	}
	want = []string{
		"type changed public.mood [enum ('sad', 'ok')|enum ('sad', 'ok', 'happy')]",
		"type added public.pair [|composite (a integer, b text)]",
		"type added public.positive [|domain over integer NOT NULL positive_check CHECK ((VALUE > 0))]",
		"sequence changed public.invoice_no [" + seq(1) + "|" + seq(10) + "]",
		"sequence added public.ticket_no [|" + seq(1) + "]",
		"table changed public.orders [table|table, row level security]",
		"trigger removed public.orders.orders_touch [CREATE TRIGGER orders_touch BEFORE UPDATE ON public.orders FOR EACH ROW EXECUTE FUNCTION public.touch()|]",
		"policy added public.orders.big [|PERMISSIVE FOR SELECT TO PUBLIC USING ((total > (100)::numeric))]",
		"grant added public.on sequence public.ticket_no to PUBLIC [|USAGE]",
		"grant changed public.on table public.orders to PUBLIC [SELECT|INSERT, SELECT]",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the new kinds' diff:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	cr, err := e.Svc.Migrate().RequestCutover(t.Context(), p, prj.ID, &appliance.CreateCutoverRequest{PreviewID: res.Preview.ID})
	if err != nil {
		t.Fatal(err)
	}
	if cr.CutoverRequest.SchemaDiffURL != "/v1/preview-databases/"+res.Preview.ID+"/schema-diff" {
		t.Fatalf("cutover request: %+v", cr.CutoverRequest)
	}
	_, err = e.Svc.Previews().SchemaDiff(t.Context(), p, "prv_unknown")
	wantKind(t, err, appliance.KindNotFound)
}
