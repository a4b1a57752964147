package appliance_test

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/integrations"
	"github.com/theappliance/appliance/appliance/integrations/deploya"
	"github.com/theappliance/appliance/appliance/integrations/deploya/deployatest"
	"github.com/theappliance/appliance/appliance/integrations/provider"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// TestMajorUpgradeBackupsAndPITR: across an upgrade by logical replication from 15 to the npm build of 17
// (no client tools) and its confirm, the new cluster archives into an archive of its own and is backed up
// (an online copy: before the cutover, and on request); a preview of the 17 project runs 17 with
// its rows; an export is refused at once naming pg_dump 17; a point-in-time restore to a time before the
// upgrade brings the project back on 15 with the rows of then, one to a time after the cutover brings back
// 17 with the rows of then; the project's key-value store keeps its keys and answers, and its deploy_a
// integration is pushed again at the cutover.
func TestMajorUpgradeBackupsAndPITR(t *testing.T) {
	t.Parallel()
	fake := deployatest.Start(t, "vercel-token", "prj_web")
	e, p := keyEnv(t, appliancetest.Options{Instances: true, IntegrationBaseURLs: map[string]string{provider.DeployA: fake.URL}})
	fronts := e.StartKVFronts(t)
	upgradeTarget(t, e)
	ctx := t.Context()
	prj := provision(t, e, p, "upback", "development")
	c, err := e.Svc.ProjectConnections(ctx, p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	exec := func(q string) {
		t.Helper()
		conn := connect(t, c.Connections.DirectURL)
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	now := func() time.Time {
		t.Helper()
		conn := connect(t, c.Connections.DirectURL)
		defer conn.Close(ctx)
		return scalar[time.Time](t, conn, "SELECT clock_timestamp()")
	}
	// phases is the rows of each phase ("15:10,17:4"), and the server's major.
	phases := func() (string, string) {
		t.Helper()
		conn := connect(t, c.Connections.DirectURL)
		defer conn.Close(ctx)
		return scalar[string](t, conn, "SELECT string_agg(phase || ':' || n, ',' ORDER BY phase) FROM (SELECT phase, count(*) n FROM items GROUP BY phase) x"),
			scalar[string](t, conn, "SHOW server_version_num")[:2]
	}
	exec("CREATE TABLE items (id serial PRIMARY KEY, phase text NOT NULL)")
	exec("INSERT INTO items (phase) SELECT 'a on 15' FROM generate_series(1, 10)")

	// A key-value store with a key, and an active deploy_a integration.
	kvRes, err := e.Svc.KV().Create(ctx, p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j := e.WaitJob(t, kvRes.Job.ID); j.State != scheduler.StateCompleted {
		t.Fatalf("kv.create: %s %s", j.State, j.Error)
	}
	// Through the RESP front, as a client of the project's store does.
	kv := redis.NewClient(&redis.Options{Addr: fronts.RESP.ListenAddr(), Password: *kvRes.KVStore.Token,
		TLSConfig: &tls.Config{RootCAs: e.CA.Pool(), ServerName: "localhost"}, MaxRetries: -1})
	t.Cleanup(func() { kv.Close() })
	if err := kv.Set(ctx, "greeting", "set on 15", 0).Err(); err != nil {
		t.Fatal(err)
	}
	kvAnswers := func(when string) {
		t.Helper()
		if v, err := kv.Ping(ctx).Result(); err != nil || v != "PONG" {
			t.Fatalf("%s: the key-value store's PING: %q %v", when, v, err)
		}
		if v, err := kv.Get(ctx, "greeting").Result(); err != nil || v != "set on 15" {
			t.Fatalf("%s: the key-value store's GET: %q %v", when, v, err)
		}
	}
	conn, err := e.Svc.Integrations().ConnectDeployA(ctx, p, prj.ID, &api.ConnectDeployARequest{DeployAProjectID: "prj_web", Token: "vercel-token", WebhookSecret: "whsec"})
	if err != nil {
		t.Fatal(err)
	}
	if j := e.WaitJob(t, conn.Job.ID); j.State != scheduler.StateCompleted {
		t.Fatalf("deploy_a sync: %s %s", j.State, j.Error)
	}
	syncs := len(integrationJobs(t, e, prj.ID, integrations.JobSync))

	// On 15: a base backup, rows, the time "before", more rows.
	res, err := e.Svc.Backups().Create(ctx, p, prj.ID, &appliance.CreateBackupRequest{Label: "on 15"})
	runJob(t, e, res, err)
	exec("INSERT INTO items (phase) SELECT 'b on 15' FROM generate_series(1, 5)")
	before := now()
	exec("INSERT INTO items (phase) SELECT 'c on 15 later' FROM generate_series(1, 3)")

	res, err = e.Svc.Upgrades().Major(ctx, p, prj.ID, 17)
	upgradeJob := runJob(t, e, res, err)
	res, err = e.Svc.Upgrades().Confirm(ctx, p, prj.ID)
	if j := runJob(t, e, res, err); !strings.Contains(string(j.Result), `"warnings":[]`) {
		t.Fatalf("confirm: %s", j.Result)
	}
	inst := instanceOf(t, e, prj)
	if inst.Major != 17 || inst.WALArchive != "pg17-"+upgradeJob.ID || inst.PreviousWALArchive != "" || inst.WALArchiveOff {
		t.Fatalf("instance after the upgrade: %+v", inst)
	}
	if got, major := phases(); got != "a on 15:10,b on 15:5,c on 15 later:3" || major != "17" {
		t.Fatalf("on 17: %s (major %s)", got, major)
	}
	kvAnswers("after the upgrade")

	// The integration was pushed again at the cutover, with the URLs that did not change.
	all := integrationJobs(t, e, prj.ID, integrations.JobSync)
	if len(all) <= syncs {
		t.Fatalf("no deploy_a sync after the upgrade (%d syncs before, %d after)", syncs, len(all))
	}
	for _, j := range all[syncs:] {
		if j := e.WaitJob(t, j.ID); j.State != scheduler.StateCompleted {
			t.Fatalf("the sync after the upgrade: %s %s", j.State, j.Error)
		}
	}
	if direct, ok := fake.Value("DIRECT_URL", "", deploya.TargetProduction); !ok || withCA(direct, e) != c.Connections.DirectURL {
		t.Fatalf("deploy_a's DIRECT_URL after the upgrade: %q, the project's %q", direct, c.Connections.DirectURL)
	}

	// The new cluster's first base backup was taken before the cutover (by the upgrade job): an online copy
	// of 17, verified.
	var first *store.Backup
	if err := e.DB.View(func(tx *store.Tx) error {
		bs, err := store.Backups.Lookup(tx, store.BackupsByProject, prj.ID, store.Query{Newest: true})
		for _, b := range bs {
			if strings.HasPrefix(b.Label, "PostgreSQL 17 before the cutover") {
				first = b
			}
		}
		return err
	}); err != nil || first == nil {
		t.Fatalf("no backup taken by the upgrade: %v", err)
	}
	if j := e.WaitJob(t, first.JobID); j.State != scheduler.StateCompleted {
		t.Fatalf("the backup after the upgrade: %s %s\n%s", j.State, j.Error, j.LastStderr)
	}
	backupOf := func(id string) *store.Backup {
		t.Helper()
		var b *store.Backup
		if err := e.DB.View(func(tx *store.Tx) (err error) { b, err = store.Backups.Get(tx, id); return err }); err != nil {
			t.Fatal(err)
		}
		return b
	}
	if b := backupOf(first.ID); b.State != api.BackupCompleted || b.Major != 17 || b.WALArchive != inst.WALArchive || b.VerificationState != api.VerificationVerified {
		t.Fatalf("the backup after the upgrade: %+v", b)
	}

	// On 17: rows, the time "after", more rows, then a backup on request.
	exec("INSERT INTO items (phase) SELECT 'd on 17' FROM generate_series(1, 4)")
	after := now()
	exec("INSERT INTO items (phase) SELECT 'e on 17 later' FROM generate_series(1, 2)")
	res, err = e.Svc.Backups().Create(ctx, p, prj.ID, &appliance.CreateBackupRequest{Label: "on 17"})
	j := runJob(t, e, res, err)
	if b := backupOf(jobResult(j)["backup_id"].(string)); b.Major != 17 || b.WALArchive != inst.WALArchive || b.VerificationState != api.VerificationVerified || b.SizeBytes == 0 {
		t.Fatalf("a backup on 17: %+v", b)
	}
	// The list says which major each backup restores.
	list, err := e.Svc.Backups().List(ctx, p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	majors := map[string]int{}
	for _, b := range list.Backups {
		majors[b.Label] = b.PostgresMajor
	}
	if majors["on 15"] != 15 || majors["on 17"] != 17 || majors[first.Label] != 17 {
		t.Fatalf("the backups' majors: %v", majors)
	}

	// Suspended, its scheduled backup cannot tell whether its data changed (no pg_waldump 17): it is woken
	// and backed up.
	if _, err := e.Svc.Backups().PutSchedule(ctx, p, prj.ID, "default", &appliance.PutScheduledBackupRequest{
		CronHour: intp(0), CronMinute: intp(0), IsActive: boolp(true)}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Svc.SuspendProject(ctx, p, prj.ID); err != nil {
		t.Fatal(err)
	}
	checkSuspended(t, e, prj.ID, inst)
	if err := e.DB.Update(func(tx *store.Tx) error { // today's 00:00 slot has not run yet
		r, err := store.ScheduledBackups.Get(tx, prj.ID)
		if err != nil {
			return err
		}
		r.LastRunAt, r.UpdatedAt = nil, r.UpdatedAt.Add(-48*time.Hour)
		return store.ScheduledBackups.Put(tx, r)
	}); err != nil {
		t.Fatal(err)
	}
	run, err := e.Svc.Backups().RunScheduled(ctx, time.Now().UTC().Truncate(24*time.Hour).Add(time.Minute))
	if err != nil || run.Skipped != 0 || run.Enqueued != 1 {
		t.Fatalf("the scheduled backup of the suspended 17 project: %+v, %v; want one enqueued", run, err)
	}
	scheds, err := e.Svc.Backups().ListSchedules(ctx, p, prj.ID)
	if err != nil || scheds.ScheduledBackups[0].LastJobID == "" {
		t.Fatalf("schedules: %+v, %v", scheds, err)
	}
	if j := e.WaitJob(t, scheds.ScheduledBackups[0].LastJobID); j.State != scheduler.StateCompleted {
		t.Fatalf("the scheduled backup on 17: %s %s", j.State, j.Error)
	}
	if got := e.Project(t, prj.ID); got.RuntimeStatus != appliance.RuntimeActive || got.IdleSuspendedAt != nil {
		t.Fatalf("after the scheduled backup: runtime_status %s; want the project woken", got.RuntimeStatus)
	}

	// Its WAL goes to its own archive, beside the first cluster's.
	exec("SELECT txid_current()") // a record in the current segment (the backup's stop switched to a new one)
	on17 := connect(t, c.Connections.DirectURL)
	seg := scalar[string](t, on17, "SELECT pg_walfile_name(pg_current_wal_lsn())")
	on17.Close(ctx)
	if err := e.AdminExec(t, prj.ID, "SELECT pg_switch_wal()"); err != nil {
		t.Fatal(err)
	}
	for path, deadline := filepath.Join(e.Dir, "backups", prj.ID, "wal-"+inst.WALArchive, seg), time.Now().Add(time.Minute); ; {
		if _, err := os.Stat(path); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("segment %s of 17 not in %s after a minute", seg, filepath.Dir(path))
		}
		time.Sleep(50 * time.Millisecond) // polling the archiver's progress, as WaitJob polls a job
	}

	// An export needs pg_dump 17, which this machine lacks: refused at once.
	if _, err := e.Svc.Exports().Create(ctx, p, prj.ID); appliance.KindOf(err) != appliance.KindConflict ||
		!strings.Contains(err.Error(), "PostgreSQL 17") || !strings.Contains(err.Error(), "pg_dump") {
		t.Fatalf("an export of the 17 project: %v", err)
	}

	// A preview of the 17 project runs 17, with its rows.
	clone, err := e.Svc.Previews().Create(ctx, p, prj.ID, &appliance.CreatePreviewRequest{Name: "on-17"})
	waitPreview(t, e, clone, err)
	cc, err := e.Svc.Previews().Connections(ctx, p, clone.Preview.ID)
	if err != nil {
		t.Fatal(err)
	}
	pv := connect(t, cc.Connections.DirectURL)
	if v := scalar[string](t, pv, "SELECT version()"); !strings.Contains(v, "PostgreSQL 17") || scalar[int64](t, pv, "SELECT count(*) FROM items") != 24 {
		t.Fatalf("the preview: %s", v)
	}
	pv.Close(ctx)
	// A preview as of a time before the upgrade runs 15, with the rows of then.
	asOf, err := e.Svc.Previews().Create(ctx, p, prj.ID, &appliance.CreatePreviewRequest{Name: "before-17", SourceRestoreTime: before.UTC().Format(time.RFC3339Nano)})
	waitPreview(t, e, asOf, err)
	ac, err := e.Svc.Previews().Connections(ctx, p, asOf.Preview.ID)
	if err != nil {
		t.Fatal(err)
	}
	pv = connect(t, ac.Connections.DirectURL)
	if v := scalar[string](t, pv, "SELECT version()"); !strings.Contains(v, "PostgreSQL 15") || scalar[int64](t, pv, "SELECT count(*) FROM items") != 15 {
		t.Fatalf("the preview as of before the upgrade: %s, %d rows", v, scalar[int64](t, pv, "SELECT count(*) FROM items"))
	}
	pv.Close(ctx)

	// A restore to before the upgrade: 15 again, with the rows of then.
	res, err = e.Svc.Backups().Restore(ctx, p, prj.ID, &appliance.RestoreRequest{RestoreTime: before.UTC().Format(time.RFC3339Nano)})
	j = runJob(t, e, res, err)
	if got, major := phases(); got != "a on 15:10,b on 15:5" || major != "15" {
		t.Fatalf("after the restore to before the upgrade (%s): %s on %s", j.Result, got, major)
	}
	if inst := instanceOf(t, e, prj); inst.Major != 15 || inst.WALArchive != "" {
		t.Fatalf("instance after the restore to 15: %+v", inst)
	}
	if v := e.Project(t, prj.ID).PostgresVersion; !strings.HasPrefix(v, "15.") {
		t.Fatalf("the project's postgres_version after the restore to 15: %q", v)
	}
	kvAnswers("after the restore to 15")

	// A restore to after the cutover: 17 again, with the rows of then.
	res, err = e.Svc.Backups().Restore(ctx, p, prj.ID, &appliance.RestoreRequest{RestoreTime: after.UTC().Format(time.RFC3339Nano)})
	j = runJob(t, e, res, err)
	if got, major := phases(); got != "a on 15:10,b on 15:5,c on 15 later:3,d on 17:4" || major != "17" {
		t.Fatalf("after the restore to after the upgrade (%s): %s on %s", j.Result, got, major)
	}
	if got := instanceOf(t, e, prj); got.Major != 17 || got.WALArchive != inst.WALArchive {
		t.Fatalf("instance after the restore to 17: %+v", got)
	}
	pooled := connect(t, c.Connections.PooledURL)
	if v := scalar[string](t, pooled, "SELECT version()"); !strings.Contains(v, "PostgreSQL 17") {
		t.Fatalf("pooled, after the restore to 17: %s", v)
	}
	pooled.Close(ctx)
	kvAnswers("after the restore to 17")
}

// TestMajorUpgradePITRWithABucket: with a bucket as the backup store, the upgraded cluster's WAL reaches an
// archive of its own in the bucket through the WAL socket (--archive), its first base backup (an online
// copy) is stored there, and restores to before and after the upgrade read each cluster's archive back.
func TestMajorUpgradePITRWithABucket(t *testing.T) {
	t.Parallel()
	e, p, _, bs := bucketEnv(t)
	upgradeTarget(t, e)
	ctx := t.Context()
	prj := provision(t, e, p, "upgraded in a bucket", "development")
	c, err := e.Svc.ProjectConnections(ctx, p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	exec := func(q string) {
		t.Helper()
		conn := connect(t, c.Connections.DirectURL)
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	query := func(q string) string {
		t.Helper()
		conn := connect(t, c.Connections.DirectURL)
		defer conn.Close(ctx)
		return scalar[string](t, conn, q)
	}
	rows := func() string {
		return query("SELECT string_agg(v, ',' ORDER BY v) || ' on ' || current_setting('server_version_num')::int / 10000 FROM items")
	}
	exec("CREATE TABLE items (v text PRIMARY KEY)")
	exec("INSERT INTO items VALUES ('a')")
	res, err := e.Svc.Backups().Create(ctx, p, prj.ID, &appliance.CreateBackupRequest{Label: "on 15"})
	runJob(t, e, res, err)
	exec("INSERT INTO items VALUES ('b')")
	before := query("SELECT clock_timestamp()::text")
	exec("INSERT INTO items VALUES ('c')")

	res, err = e.Svc.Upgrades().Major(ctx, p, prj.ID, 17)
	runJob(t, e, res, err)
	res, err = e.Svc.Upgrades().Confirm(ctx, p, prj.ID)
	runJob(t, e, res, err)
	inst := instanceOf(t, e, prj)
	var first *store.Backup
	if err := e.DB.View(func(tx *store.Tx) error {
		bks, err := store.Backups.Lookup(tx, store.BackupsByProject, prj.ID, store.Query{})
		for _, b := range bks {
			if strings.HasPrefix(b.Label, "PostgreSQL 17 before the cutover") {
				first = b
			}
		}
		return err
	}); err != nil || first == nil {
		t.Fatalf("no backup taken by the upgrade: %v", err)
	}
	if j := e.WaitJob(t, first.JobID); j.State != scheduler.StateCompleted {
		t.Fatalf("the backup after the upgrade into the bucket: %s %s\n%s", j.State, j.Error, j.LastStderr)
	}
	exec("INSERT INTO items VALUES ('d')")
	after := query("SELECT clock_timestamp()::text")
	exec("INSERT INTO items VALUES ('e')")

	seg := query("SELECT pg_walfile_name(pg_current_wal_lsn())")
	if err := e.AdminExec(t, prj.ID, "SELECT pg_switch_wal()"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; {
		ok, err := bs.WALArchived(ctx, prj.ID, inst.WALArchive, seg)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("segment %s of 17 not in the bucket's archive %s after a minute", seg, inst.WALArchive)
		}
		time.Sleep(50 * time.Millisecond) // polling the archiver's progress, as WaitJob polls a job
	}
	if entries, _ := os.ReadDir(filepath.Join(e.Dir, "backups", prj.ID)); len(entries) > 0 {
		for _, en := range entries {
			if strings.HasPrefix(en.Name(), "wal") {
				t.Fatalf("a WAL archive on the local disk with a bucket: %s", en.Name())
			}
		}
	}

	for _, step := range []struct{ at, want string }{{before, "a,b on 15"}, {after, "a,b,c,d on 17"}} {
		at, err := time.Parse("2006-01-02 15:04:05.999999-07", step.at)
		if err != nil {
			t.Fatal(err)
		}
		res, err := e.Svc.Backups().Restore(ctx, p, prj.ID, &appliance.RestoreRequest{RestoreTime: at.UTC().Format(time.RFC3339Nano)})
		j := runJob(t, e, res, err)
		if got := rows(); got != step.want {
			t.Fatalf("after the restore to %s (%s): %q, want %q", step.at, j.Result, got, step.want)
		}
	}
}
