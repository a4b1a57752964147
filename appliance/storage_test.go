package appliance_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/storageguard"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// storageSlack is what a client writing as fast as it can may store past a limit before the storage guard
// (at storageguard.Interval) has ended its session: its write rate times the interval and the reaction
// (docs/api-decisions.md "Storage limits held, ephemeral bounds, disk reserve"). On these machines a
// single INSERT writes 20 to about 200 MB/s (a quiet machine): at most about 20 MB in the guard's 100 ms
// and the rest of the slack for the session's end.
const storageSlack = 48 << 20

// TestStorageLimitHoldsAgainstAFastWriter: an ephemeral database and a claimed project with a 32 MB limit
// take 200 MB written as fast as one statement can; the guard stops the writer within storageSlack of the
// limit; the tenant cannot lift the read-only lock (ALTER SYSTEM refused; SET, SET SESSION
// CHARACTERISTICS, ALTER DATABASE/ROLE … RESET accepted but writing after them ends its logins, which it
// cannot give back to itself), and the database stays within the limit, the growth allowed and the slack.
func TestStorageLimitHoldsAgainstAFastWriter(t *testing.T) {
	t.Parallel()
	const limit = 32 << 20
	e, p := keyEnv(t, appliancetest.Options{Instances: true,
		Ephemeral: &appliance.EphemeralLimits{PerIPPerHour: 10, Live: 5, StorageBytes: limit}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.Svc.Storage().Run(ctx, storageguard.Interval) }()
	t.Cleanup(func() { cancel(); <-done })

	created, err := e.Svc.Previews().CreateEphemeral(t.Context(), "192.0.2.9", &appliance.CreateEphemeralRequest{})
	if err != nil {
		t.Fatal(err)
	}
	eph := created.EphemeralDatabase.ProjectID
	e.WaitJob(t, e.Project(t, eph).LatestJobID)
	got, err := e.Svc.Previews().GetEphemeral(t.Context(), eph, created.ClaimToken)
	if err != nil || got.Connections == nil {
		t.Fatalf("get: %+v %v", got, err)
	}
	prj, pc, _ := connected(t, e, p, "guarded")
	if err := e.DB.Update(func(tx *store.Tx) error {
		cur, err := store.Projects.Get(tx, prj.ID)
		if err != nil {
			return err
		}
		cur.StorageLimitBytes = limit
		return store.Projects.Put(tx, cur)
	}); err != nil {
		t.Fatal(err)
	}
	// A role made through the roles endpoint is a login of the tenant's too: the lock ends it as well.
	role, err := e.Svc.Databases().CreateRole(t.Context(), p, prj.ID, &api.CreateRoleRequest{Name: "guarded_reader"})
	if err != nil {
		t.Fatal(err)
	}
	ru, err := url.Parse(pc.Connections.DirectURL)
	if err != nil {
		t.Fatal(err)
	}
	ru.User = url.UserPassword(role.Role.Name, role.Password)
	connect(t, ru.String()).Close(t.Context())
	for _, c := range []struct{ name, id, url, other string }{
		{"ephemeral", eph, got.Connections.DirectURL, ""},
		{"project", prj.ID, pc.Connections.DirectURL, ru.String()},
	} {
		t.Run(c.name, func(t *testing.T) { holdsLimit(t, e, c.id, c.url, c.other, limit) })
	}
}

// holdsLimit fills the database at url past limit; other, when set, is another login of the tenant's that
// the no-connections lock must end too.
func holdsLimit(t *testing.T, e *appliancetest.Env, id, url, other string, limit int64) {
	size := func() int64 {
		var n int64
		if err := e.Svc.AdminQueryRow(t.Context(), id, "SELECT pg_database_size(current_database())", nil, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	lockOf := func() string { return e.Project(t, id).StorageLock }
	writer := connect(t, url)
	if _, err := writer.Exec(t.Context(), "CREATE TABLE fill (g int, pad text)"); err != nil {
		t.Fatal(err)
	}
	const fill200MB = "INSERT INTO fill SELECT g, repeat('x', 1000) FROM generate_series(1, 200000) g"
	if _, err := writer.Exec(t.Context(), fill200MB); err == nil {
		t.Fatalf("200 MB written past a %d MB limit: the database holds %d MB", limit>>20, size()>>20)
	}
	waitFor(t, "the read-only lock", func() bool { return lockOf() == storageguard.ReadOnly })
	locked := size()
	if locked > limit+storageSlack {
		t.Fatalf("the writer stored %d MB past the %d MB limit (slack %d MB)", (locked-limit)>>20, limit>>20, storageSlack>>20)
	}
	t.Logf("stopped at %.1f MB of a %d MB limit", float64(locked)/(1<<20), limit>>20)

	tenant := connect(t, url)
	if _, err := tenant.Exec(t.Context(), "INSERT INTO fill VALUES (0, 'more')"); err == nil || !strings.Contains(err.Error(), "read-only transaction") {
		t.Fatalf("a write over the limit: %v", err)
	}
	if n := scalar[int64](t, tenant, "SELECT count(*) FROM fill"); n != 0 {
		t.Fatalf("the interrupted INSERT left %d rows visible", n)
	}
	// What a tenant can try: ALTER SYSTEM and its own LOGIN are refused; the rest is accepted…
	for _, q := range []string{"ALTER SYSTEM SET default_transaction_read_only = off", "ALTER ROLE CURRENT_USER CREATEROLE"} {
		if _, err := tenant.Exec(t.Context(), q); err == nil {
			t.Fatalf("the tenant ran %s", q)
		}
	}
	db := pgx.Identifier{scalar[string](t, tenant, "SELECT current_database()")}.Sanitize()
	for _, q := range []string{
		"SET default_transaction_read_only = off",
		"SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE",
		"ALTER DATABASE " + db + " RESET default_transaction_read_only",
		"ALTER DATABASE " + db + " CONNECTION LIMIT -1",
		"ALTER ROLE CURRENT_USER RESET default_transaction_read_only",
	} {
		if _, err := tenant.Exec(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// …and writing after it ends the tenant's logins.
	if _, err := tenant.Exec(t.Context(), fill200MB); err == nil {
		t.Fatalf("200 MB written after lifting the read-only default: %d MB stored", size()>>20)
	}
	waitFor(t, "the no-connections lock", func() bool { return lockOf() == storageguard.NoConnections })
	// No login of the tenant's, to its database or to another from which it could ALTER DATABASE.
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	for _, database := range []string{cfg.Database, "postgres"} {
		c := cfg.Copy()
		c.Database = database
		if conn, err := pgx.ConnectConfig(t.Context(), c); err == nil {
			conn.Close(t.Context())
			t.Fatalf("a login to %s was accepted after the tenant lifted the read-only lock and wrote", database)
		}
	}
	if other != "" {
		if conn, err := pgx.Connect(t.Context(), other); err == nil {
			conn.Close(t.Context())
			t.Fatal("a role made through the roles endpoint still logs in under the no-connections lock")
		}
	}
	if n := size(); n > max(locked, limit)+storageguard.LockGrowth+storageSlack {
		t.Fatalf("the database holds %d MB after the second writer (locked at %d MB)", n>>20, locked>>20)
	}
}

// dataLimit is the soft "Max data size" of a process (/proc/<pid>/limits), "unlimited" or bytes.
func dataLimit(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "Max data size") {
			return strings.Fields(strings.TrimPrefix(line, "Max data size"))[0]
		}
	}
	t.Fatalf("no Max data size in /proc/%d/limits", pid)
	return ""
}

// TestEphemeralServerIsBounded: an ephemeral database's server runs with its memory bounds in force: its
// postmaster and the tenant's session have RLIMIT_DATA, so a sort the tenant gives work_mem = 10GB ends
// in "out of memory" instead of taking the machine's memory; temp_file_limit is set and the tenant cannot
// raise it; max_connections and the worker processes are the ephemeral ones.
func TestEphemeralServerIsBounded(t *testing.T) {
	t.Parallel()
	const perProcess = 64 << 20
	e, _ := keyEnv(t, appliancetest.Options{Instances: true,
		Ephemeral: &appliance.EphemeralLimits{PerIPPerHour: 10, Live: 5, ProcessMemoryBytes: perProcess, TempFileBytes: 32 << 20, MaxConnections: 8}})
	created, err := e.Svc.Previews().CreateEphemeral(t.Context(), "192.0.2.10", &appliance.CreateEphemeralRequest{})
	if err != nil {
		t.Fatal(err)
	}
	id := created.EphemeralDatabase.ProjectID
	if j := e.WaitJob(t, e.Project(t, id).LatestJobID); j.State != scheduler.StateCompleted {
		t.Fatalf("provision: %s", j.Error)
	}
	got, err := e.Svc.Previews().GetEphemeral(t.Context(), id, created.ClaimToken)
	if err != nil || got.Connections == nil {
		t.Fatalf("get: %+v %v", got, err)
	}
	tenant := connect(t, got.Connections.DirectURL)
	var inst *store.Instance
	e.DB.View(func(tx *store.Tx) (err error) {
		inst, err = store.Instances.Get(tx, e.Project(t, id).PrimaryInstanceID)
		return err
	})
	want := strconv.Itoa(perProcess)
	if got := dataLimit(t, postmasterPID(t, inst)); got != want {
		t.Fatalf("the postmaster's data limit is %s, want %s", got, want)
	}
	if got := dataLimit(t, int(scalar[int32](t, tenant, "SELECT pg_backend_pid()"))); got != want {
		t.Fatalf("the tenant's session's data limit is %s, want %s", got, want)
	}
	for q, want := range map[string]string{"SHOW temp_file_limit": "32MB", "SHOW max_connections": "8", "SHOW max_worker_processes": "2",
		"SHOW maintenance_work_mem": "16MB", "SHOW autovacuum_work_mem": "16MB"} {
		if got := scalar[string](t, tenant, q); got != want {
			t.Fatalf("%s: %s, want %s", q, got, want)
		}
	}
	if _, err := tenant.Exec(t.Context(), "SET temp_file_limit = -1"); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("the tenant raised temp_file_limit: %v", err)
	}
	// work_mem is the tenant's to set (PostgreSQL lets any session), the memory is not: a 300 MB sort in
	// memory fails, and the session goes on.
	if _, err := tenant.Exec(t.Context(), "SET work_mem = '10GB'"); err != nil {
		t.Fatal(err)
	}
	_, err = tenant.Exec(t.Context(), "SELECT count(*) FROM (SELECT g, repeat(md5(g::text), 4) AS s FROM generate_series(1, 2000000) g ORDER BY s) x")
	if err == nil || !strings.Contains(err.Error(), "out of memory") {
		t.Fatalf("a sort of 300 MB with work_mem = 10GB: %v", err)
	}
	if n := scalar[int32](t, tenant, "SELECT 1"); n != 1 {
		t.Fatal("the session did not survive its query's out of memory")
	}
	// The bound leaves ordinary work alone: an index build and a vacuum of a 40 MB table.
	if _, err := tenant.Exec(t.Context(), "RESET work_mem; CREATE TABLE t AS SELECT g, md5(g::text) AS s FROM generate_series(1, 500000) g; CREATE INDEX ON t (s); DELETE FROM t WHERE g % 2 = 0"); err != nil {
		t.Fatal(err)
	}
	if _, err := tenant.Exec(t.Context(), "VACUUM t"); err != nil {
		t.Fatalf("a vacuum within the bound: %v", err)
	}
}
