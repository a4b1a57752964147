package appliance_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/appliance/programs"
	"github.com/theappliance/appliance/appliance/testtools"
	"github.com/theappliance/appliance/scheduler"
)

// pgUpgradeTarget gives the appliance Debian 13's PostgreSQL 17 (server, pg_upgrade, client tools) as an
// operator would with up --pg-dist 17=<its bin directory>: linked where the appliance finds the majors it
// obtains.
func pgUpgradeTarget(t *testing.T, e *appliancetest.Env) postgres.Binaries {
	t.Helper()
	bin, err := testtools.DebianPostgres(t.Context(), 17)
	if err != nil {
		t.Fatal(err)
	}
	b, err := programs.Dist{Major: 17, Source: bin}.Obtain(t.Context(), appliance.PostgresDistDir(e.Dir), nil)
	if err != nil {
		t.Fatal(err)
	}
	if tools := b.Tools(); b.Major != 17 || !slices.Contains(tools, "pg_upgrade") || !slices.Contains(tools, "pg_dump") {
		t.Fatalf("Debian 13's 17: major %d, tools %v", b.Major, tools)
	}
	if c := statusComponent(t, e, "postgres-majors"); c.Status != appliance.StatusOperational ||
		!strings.Contains(c.Message, "17: "+b.Dir+" (server, pg_upgrade: upgrades to it by pg_upgrade; client tools: pg_dump, pg_dumpall, pg_restore, pg_basebackup, pg_verifybackup, psql)") {
		t.Fatalf("/status's majors: %+v", c)
	}
	return b
}

// TestMajorUpgradeByPgUpgrade: a project on 15 with rows, sequences, a view, a function and an extension,
// written to through its pooled port during the whole upgrade, upgraded to 17 by pg_upgrade (the target
// has it): every acknowledged row is there, sequences go on past their values, the same URLs reach 17.
// The preflight says first what a rollback loses (the writes made on 17); the rollback does exactly that
// and says how many row changes it discarded. Upgraded again and confirmed: the old directory is gone. A
// restore to a time before the upgrade brings back 15.
func TestMajorUpgradeByPgUpgrade(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	bin17 := pgUpgradeTarget(t, e)
	ctx := t.Context()
	prj := provision(t, e, p, "pgupgrade", "development")
	c, _ := e.Svc.ProjectConnections(ctx, p, prj.ID)
	conn := connect(t, c.Connections.DirectURL)
	for _, stmt := range []string{
		"CREATE TABLE items (id serial PRIMARY KEY, name text NOT NULL, price numeric)",
		"INSERT INTO items (name, price) SELECT 'item ' || g, g * 1.5 FROM generate_series(1, 1000) g",
		"CREATE TABLE writes (id bigserial PRIMARY KEY, n int NOT NULL)",
		"CREATE VIEW expensive AS SELECT name FROM items WHERE price > 1000",
		"CREATE FUNCTION double_price(p numeric) RETURNS numeric LANGUAGE sql IMMUTABLE AS 'SELECT p * 2'",
		"CREATE TABLE notes (body text)", // no primary key: no matter to pg_upgrade
		"INSERT INTO notes VALUES ('kept')",
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	enable := func(name string) {
		res, err := e.Svc.Extensions().Enable(ctx, p, prj.ID, &appliance.ExtensionRequest{Name: name})
		runJob(t, e, res, err)
	}
	enable("pgcrypto") // in both installations
	enable("hypopg")   // Debian's package for 15 only

	// Preflight and the upgrade name the extension 17 lacks, and change nothing.
	for _, call := range []func() (*appliance.JobResponse, error){
		func() (*appliance.JobResponse, error) { return e.Svc.Upgrades().Preflight(ctx, p, prj.ID, 17) },
		func() (*appliance.JobResponse, error) { return e.Svc.Upgrades().Major(ctx, p, prj.ID, 17) },
	} {
		res, err := call()
		if err != nil {
			t.Fatal(err)
		}
		j := e.WaitJob(t, res.Job.ID)
		if j.State != scheduler.StateFailed || !strings.Contains(j.Error, "extension hypopg (database "+prj.DatabaseName+") is not available in PostgreSQL 17") {
			t.Fatalf("%s with hypopg: %s %q", j.Type, j.State, j.Error)
		}
	}
	if inst := instanceOf(t, e, prj); inst.Major != 15 || inst.PreviousDir != "" {
		t.Fatalf("instance after the refused upgrade: %+v", inst)
	}
	res, err := e.Svc.Extensions().Disable(ctx, p, prj.ID, "hypopg")
	runJob(t, e, res, err)

	// A base backup on 15 and the time "before", for the restore at the end.
	res, err = e.Svc.Backups().Create(ctx, p, prj.ID, &appliance.CreateBackupRequest{Label: "on 15"})
	runJob(t, e, res, err)
	before := scalar[time.Time](t, conn, "SELECT clock_timestamp()")
	if _, err := conn.Exec(ctx, "INSERT INTO notes VALUES ('after before')"); err != nil {
		t.Fatal(err)
	}

	// What only the new major refuses (a view of a column 17 moved to pg_stat_checkpointer) fails the
	// preflight's trial, naming it; the project stays as it was.
	if _, err := conn.Exec(ctx, "CREATE VIEW checkpoints AS SELECT checkpoints_timed FROM pg_stat_bgwriter"); err != nil {
		t.Fatal(err)
	}
	res, err = e.Svc.Upgrades().Preflight(ctx, p, prj.ID, 17)
	if err != nil {
		t.Fatal(err)
	}
	if j := e.WaitJob(t, res.Job.ID); j.State != scheduler.StateFailed || !strings.Contains(j.Error, "pg_upgrade of the schema into PostgreSQL 17 failed") ||
		!strings.Contains(j.Error, "checkpoints_timed") {
		t.Fatalf("preflight of a schema 17 refuses: %s %q", j.State, j.Error)
	}
	if _, err := conn.Exec(ctx, "DROP VIEW checkpoints"); err != nil {
		t.Fatal(err)
	}

	// The preflight says which method runs and what a rollback loses.
	res, err = e.Svc.Upgrades().Preflight(ctx, p, prj.ID, 17)
	j := runJob(t, e, res, err)
	if r := jobResult(j); r["method"] != "pg_upgrade" || !strings.Contains(string(j.Result), "every write made on PostgreSQL 17 after the upgrade is lost by a rollback") {
		t.Fatalf("preflight: %s", j.Result)
	}
	conn.Close(ctx)
	on15 := instanceOf(t, e, prj)
	for _, dir := range []string{on15.Dir + "-trial", on15.Dir + "-preflight", on15.Dir + "-pg17"} {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Fatalf("the preflight's scratch cluster %s: %v", dir, err)
		}
	}

	items := int64(1000)
	upgrade := func() map[string]any {
		t.Helper()
		w := startWriter(t, c.Connections.PooledURL)
		res, err := e.Svc.Upgrades().Major(ctx, p, prj.ID, 17)
		j := runJob(t, e, res, err)
		acked, errs, gap := w.stop()
		r := jobResult(j)
		t.Logf("upgrade: %d writes acknowledged during it, %d failed; the client's longest wait between writes %v; write pause %v ms %v, total %v ms",
			len(acked), errs, gap.Round(time.Millisecond), r["write_pause_ms"], r["steps_ms"], r["total_ms"])
		if r["method"] != "pg_upgrade" || len(acked) == 0 || !strings.Contains(string(j.Result), "every write made on PostgreSQL 17 after the upgrade is lost by a rollback") {
			t.Fatalf("upgrade result %s, %d writes acknowledged", j.Result, len(acked))
		}
		on17 := connect(t, c.Connections.DirectURL)
		defer on17.Close(ctx)
		if v := scalar[string](t, on17, "SELECT version()"); !strings.Contains(v, "PostgreSQL 17") {
			t.Fatalf("after the upgrade: %s", v)
		}
		checkAcked(t, on17, acked, "after the upgrade")
		// A query costly enough for JIT runs (without it: the installation has no JIT provider).
		if _, err := on17.Exec(ctx, "SET jit_above_cost = 0"); err != nil {
			t.Fatal(err)
		}
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
		pooled := connect(t, c.Connections.PooledURL)
		defer pooled.Close(ctx)
		if v := scalar[string](t, pooled, "SELECT version()"); !strings.Contains(v, "PostgreSQL 17") {
			t.Fatalf("pooled, after the upgrade: %s", v)
		}
		return r
	}
	up := upgrade()
	inst := instanceOf(t, e, prj)
	if inst.Major != 17 || inst.PreviousMajor != 15 || inst.UpgradeMethod != "pg_upgrade" || inst.WALArchive == "" || inst.PreviousWALArchive != "" {
		t.Fatalf("instance after the upgrade: %+v (%v)", inst, up)
	}
	m, err := e.Svc.Upgrades().Majors(ctx, p, prj.ID)
	if err != nil || m.Pending == nil || m.Pending.Method != "pg_upgrade" || m.Pending.PreviousMajor != 15 {
		t.Fatalf("majors while the upgrade awaits confirm: %+v %v", m, err)
	}

	// Rollback: back on 15 as it was at the upgrade; the writes on 17 are gone, as the preflight said, and
	// the rollback says how many row changes it discarded.
	on17 := connect(t, c.Connections.DirectURL)
	if _, err := on17.Exec(ctx, "INSERT INTO items (name, price) SELECT 'on 17 ' || g, 1 FROM generate_series(1, 5) g"); err != nil {
		t.Fatal(err)
	}
	writesOn17 := scalar[int64](t, on17, "SELECT count(*) FROM writes")
	on17.Close(ctx)
	res, err = e.Svc.Upgrades().Rollback(ctx, p, prj.ID)
	j = runJob(t, e, res, err)
	r := jobResult(j)
	t.Logf("rollback: %s", j.Result)
	if r["method"] != "pg_upgrade" || r["row_changes_discarded"] == nil || r["row_changes_discarded"].(float64) < 6 {
		t.Fatalf("rollback result: %s", j.Result)
	}
	back := connect(t, c.Connections.DirectURL)
	if v := scalar[string](t, back, "SELECT version()"); !strings.Contains(v, "PostgreSQL 15") {
		t.Fatalf("after the rollback: %s", v)
	}
	if n := scalar[int64](t, back, "SELECT count(*) FROM items WHERE name LIKE 'on 17 %'"); n != 0 {
		t.Fatalf("the rollback kept %d rows written on 17", n)
	}
	if n := scalar[int64](t, back, "SELECT count(*) FROM writes"); n >= writesOn17 {
		t.Fatalf("writes after the rollback: %d, on 17 %d", n, writesOn17)
	}
	if n := scalar[int64](t, back, "SELECT count(*) FROM items"); n != items {
		t.Fatalf("%d items after the rollback", n)
	}
	back.Close(ctx)
	if inst := instanceOf(t, e, prj); inst.Major != 15 || inst.PreviousDir != "" || inst.WALArchive != "" || inst.PreviousWALArchive != "" {
		t.Fatalf("instance after the rollback: %+v", inst)
	}
	if _, err := os.Stat(inst.Dir); !os.IsNotExist(err) {
		t.Fatalf("the 17 cluster %s after the rollback: %v", inst.Dir, err)
	}
	pooled := connect(t, c.Connections.PooledURL)
	if v := scalar[string](t, pooled, "SELECT version()"); !strings.Contains(v, "PostgreSQL 15") {
		t.Fatalf("pooled, after the rollback: %s", v)
	}
	pooled.Close(ctx)

	// Again, then confirm: the old directory is gone.
	upgrade()
	inst = instanceOf(t, e, prj)
	res, err = e.Svc.Upgrades().Confirm(ctx, p, prj.ID)
	j = runJob(t, e, res, err)
	if _, err := os.Stat(inst.PreviousDir); !os.IsNotExist(err) {
		t.Fatalf("the old directory %s after confirm (%s): %v", inst.PreviousDir, j.Result, err)
	}
	if inst := instanceOf(t, e, prj); inst.Major != 17 || inst.PreviousDir != "" || inst.PreviousWALArchive != "" {
		t.Fatalf("instance after confirm: %+v", inst)
	}
	if _, err := e.Svc.Upgrades().Rollback(ctx, p, prj.ID); appliance.KindOf(err) != appliance.KindConflict {
		t.Fatalf("rollback after confirm: %v", err)
	}

	// 17's client tools run the project's dumps and backups: an export by pg_dump 17, a base backup by
	// pg_basebackup 17 checked by pg_verifybackup 17 (its WAL read), and the periodic restore test of it.
	ex, err := e.Svc.Exports().Create(ctx, p, prj.ID)
	if err != nil {
		t.Fatalf("an export of the 17 project: %v", err)
	}
	if j := e.WaitJob(t, ex.Job.ID); j.State != scheduler.StateCompleted {
		t.Fatalf("the export of the 17 project: %s %s\n%s", j.State, j.Error, j.LastStderr)
	}
	out, err := exec.Command(filepath.Join(bin17.Dir, "pg_restore"), "--list", filepath.Join(e.Dir, "backups", prj.ID, "exports", ex.ExportID+".dump")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Dumped by pg_dump version: 17.") || !strings.Contains(string(out), "TABLE public items") {
		t.Fatalf("the export's dump: %v\n%s", err, out)
	}
	res, err = e.Svc.Backups().Create(ctx, p, prj.ID, &appliance.CreateBackupRequest{Label: "on 17"})
	j = runJob(t, e, res, err)
	if r := jobResult(j); r["method"] != "pg_basebackup" || r["verified_with"] != filepath.Join(bin17.Dir, "pg_verifybackup") ||
		r["verify_args"] != nil || r["verification_state"] != "verified" || r["major"] != float64(17) {
		t.Fatalf("a backup of the 17 project: %s", j.Result)
	}
	if vr, err := e.Svc.VerifyBackups(ctx, time.Now(), time.Hour); err != nil || vr.Verified != 1 || vr.Failed != 0 {
		t.Fatalf("the restore test of the 17 project's backup: %+v %v", vr, err)
	}

	// A restore to a time before the upgrade: 15, with the rows of then.
	res, err = e.Svc.Backups().Restore(ctx, p, prj.ID, &appliance.RestoreRequest{RestoreTime: before.UTC().Format(time.RFC3339Nano)})
	j = runJob(t, e, res, err)
	old := connect(t, c.Connections.DirectURL)
	defer old.Close(ctx)
	if v := scalar[string](t, old, "SELECT version()"); !strings.Contains(v, "PostgreSQL 15") ||
		scalar[int64](t, old, "SELECT count(*) FROM items") != 1000 || scalar[string](t, old, "SELECT string_agg(body, ',') FROM notes") != "kept" {
		t.Fatalf("after the restore to before the upgrade (%s): %s", j.Result, v)
	}
	if inst := instanceOf(t, e, prj); inst.Major != 15 || inst.WALArchive != "" {
		t.Fatalf("instance after the restore to 15: %+v", inst)
	}
}
