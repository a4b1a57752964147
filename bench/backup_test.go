package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// mbPerScale is roughly what one pgbench scale unit takes in PostgreSQL 15 (pgbench_accounts with 100 000
// rows and its primary key), used to pick the scale for BENCH_BACKUP_MB; the real size is measured.
const mbPerScale = 15.0

// backupJobWait bounds the wait for one backup or restore job.
const backupJobWait = 30 * time.Minute

// BenchmarkBackup measures, on one project loaded with about BENCH_BACKUP_MB (default 1024) MiB:
//
//   - the appliance's base backup (CreateBackup, what POST /v1/projects/<id>/backups calls, until its job
//     has completed), with the job's own timings_ms: the pg_basebackup step apart from pg_verifybackup;
//   - pg_basebackup run by hand against the same instance, as the same OS user, with the job's options,
//     into a directory on the same file system;
//   - a point-in-time restore (RestoreProject with restore_time just after a marker row) until its job has
//     completed, with the job's timings_ms, and the marker checked.
//
// The appliance and the hand run alternate, BENCH_ROUNDS (default 3) of each, in the order A H H A A H ...
// so that neither always runs first after the load or after the other. Everything runs once whatever b.N
// is: use -benchtime 1x.
func BenchmarkBackup(b *testing.B) {
	sizeMB := envInt(b, "BENCH_BACKUP_MB", 1024)
	rounds := envInt(b, "BENCH_ROUNDS", 3)
	ctx := b.Context()
	loadBefore := loadavg()

	e := appliancetest.New(b, appliancetest.Options{Instances: true})
	p, err := e.Svc.Identity().Authenticate(ctx, e.Bootstrap.APIKey)
	if err != nil {
		b.Fatal(err)
	}
	res, err := e.Svc.CreateProject(ctx, p, &appliance.CreateProjectRequest{Name: "backup bench", Environment: "development"})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := waitBenchJob(ctx, e, res.Job.ID); err != nil {
		b.Fatal(err)
	}
	prj := e.Project(b, res.Project.ID)
	var inst *store.Instance
	if err := e.DB.View(func(tx *store.Tx) (err error) { inst, err = store.Instances.Get(tx, prj.PrimaryInstanceID); return err }); err != nil {
		b.Fatal(err)
	}
	adminPW, err := e.Box.Open(inst.AdminPassword)
	if err != nil {
		b.Fatal(err)
	}
	user, err := daemon.DefaultOSUser()
	if err != nil {
		b.Fatal(err)
	}
	bin := e.Bin
	// The connection options of createBackupJob (appliance/backups/jobs.go).
	pgEnv := []string{"PGPASSWORD=" + string(adminPW), "PGSSLMODE=disable", "PGCONNECT_TIMEOUT=10"}
	conn := []string{"-h", "127.0.0.1", "-p", strconv.Itoa(inst.Port), "-U", postgres.AdminRole}

	// Load the data: pgbench's tables, generated on the server (-I G), vacuumed, with primary keys.
	scale := max(1, int(math.Round(float64(sizeMB)/mbPerScale)))
	pgbench, err := bin.Path("pgbench")
	if err != nil {
		b.Fatal(err)
	}
	tLoad := time.Now()
	args := append([]string{"-i", "-q", "-s", strconv.Itoa(scale), "-I", "dtGvp"}, conn...)
	if out, err := runAs(user, pgEnv, pgbench, append(args, prj.DatabaseName)...); err != nil {
		b.Fatalf("pgbench -i: %v\n%s", err, out)
	}
	if err := e.AdminExec(b, prj.ID, "CHECKPOINT"); err != nil {
		b.Fatal(err)
	}
	loadTime := time.Since(tLoad)
	c, err := e.Svc.ProjectConnections(ctx, p, prj.ID)
	if err != nil {
		b.Fatal(err)
	}
	var dbBytes int64
	if err := queryRow(ctx, c.Connections.DirectURL, "SELECT pg_database_size(current_database())", &dbBytes); err != nil {
		b.Fatal(err)
	}
	dbMB := float64(dbBytes) / (1 << 20)
	b.Logf("load average before: %s; pgbench -i -s %d (server-side generation): database %.0f MB, loaded in %.1f s", loadBefore, scale, dbMB, loadTime.Seconds())

	// The hand runs' directory: next to the backup store, on the same file system, owned by the OS user.
	handRoot := filepath.Join(e.Dir, "hand-backups")
	if err := os.Mkdir(handRoot, 0o700); err != nil {
		b.Fatal(err)
	}
	if err := user.Chown(handRoot); err != nil {
		b.Fatal(err)
	}
	basebackup, err := bin.Path("pg_basebackup")
	if err != nil {
		b.Fatal(err)
	}

	var appl []applianceBackup
	var hand []time.Duration
	var handBytes int64
	runAppliance := func(r int) {
		syscall.Sync() // earlier writes are not flushed on the clock of this run
		t0 := time.Now()
		res, err := e.Svc.Backups().Create(ctx, p, prj.ID, &appliance.CreateBackupRequest{Label: fmt.Sprintf("bench %d", r)})
		if err != nil {
			b.Fatal(err)
		}
		j, err := waitBenchJob(ctx, e, res.Job.ID)
		if err != nil {
			b.Fatal(err)
		}
		a := applianceBackup{total: time.Since(t0)}
		if j.StartedAt != nil {
			a.queue = j.StartedAt.Sub(t0)
		}
		if err := json.Unmarshal(j.Result, &a.result); err != nil {
			b.Fatalf("backup job result %s: %v", j.Result, err)
		}
		if a.result.Timings["basebackup"] == 0 || a.result.VerificationState != appliance.VerificationVerified {
			b.Fatalf("backup job result %s: want timings_ms.basebackup and a verified backup", j.Result)
		}
		appl = append(appl, a)
	}
	runHand := func(r int) {
		dir := filepath.Join(handRoot, strconv.Itoa(r))
		syscall.Sync()
		args := append([]string{"-D", dir, "-F", "p", "-X", "stream", "--checkpoint=fast", "--no-password",
			"--label", "hand " + strconv.Itoa(r)}, conn...)
		t0 := time.Now()
		out, err := runAs(user, pgEnv, basebackup, args...)
		d := time.Since(t0)
		if err != nil {
			b.Fatalf("pg_basebackup by hand: %v\n%s", err, out)
		}
		hand = append(hand, d)
		if handBytes, err = treeSize(dir); err != nil {
			b.Fatal(err)
		}
		// Kept until all rounds are done, as the appliance's backups are: no deletion (and no discard of
		// the freed blocks) overlaps a later run.
	}
	for r := range rounds {
		if r%2 == 0 {
			runAppliance(r)
			runHand(r)
		} else {
			runHand(r)
			runAppliance(r)
		}
	}
	if err := os.RemoveAll(handRoot); err != nil {
		b.Fatal(err)
	}

	// Throughput: the database's size over the pg_basebackup time (the same numerator for both).
	applBB := make([]time.Duration, len(appl))
	var applEach, handEach []string
	for i, a := range appl {
		applBB[i] = time.Duration(a.result.Timings["basebackup"] * float64(time.Millisecond))
		applEach = append(applEach, fmt.Sprintf("%.0f", a.result.Timings["basebackup"]))
	}
	for _, d := range hand {
		handEach = append(handEach, fmt.Sprintf("%.0f", ms(d)))
	}
	applMed, handMed := median(applBB), median(hand)
	mbps := func(d time.Duration) float64 { return dbMB / d.Seconds() }
	ratio := applMed.Seconds() / handMed.Seconds()
	b.ReportMetric(dbMB, "db-MB")
	b.ReportMetric(mbps(applMed), "appliance-MB/s")
	b.ReportMetric(mbps(handMed), "hand-MB/s")
	b.ReportMetric(ratio, "appliance/hand-time")
	b.Logf("pg_basebackup of %.0f MB (backup %.0f MB): appliance median %.0f ms = %.1f MB/s (each, ms: %s; spread %.1f-%.1f MB/s); by hand median %.0f ms = %.1f MB/s (each, ms: %s; spread %.1f-%.1f MB/s); appliance/hand time %.3f",
		dbMB, float64(appl[0].result.SizeBytes)/(1<<20), ms(applMed), mbps(applMed), strings.Join(applEach, " "),
		mbps(slices.Max(applBB)), mbps(slices.Min(applBB)), ms(handMed), mbps(handMed), strings.Join(handEach, " "),
		mbps(slices.Max(hand)), mbps(slices.Min(hand)), ratio)
	b.Logf("by hand, backup size %.0f MB; order of the runs: %s", float64(handBytes)/(1<<20), runOrder(rounds))
	totals := make([]time.Duration, len(appl))
	var queue []string
	for i, a := range appl {
		totals[i] = a.total
		queue = append(queue, fmt.Sprintf("%.0f", ms(a.queue)))
	}
	b.ReportMetric(float64(median(totals).Nanoseconds()), "ns/op") // one appliance backup, CreateBackup -> job completed
	b.ReportMetric(median(totals).Seconds(), "backup-job-s")
	b.Logf("appliance backup job, CreateBackup -> completed: median %.0f ms (each: %s); queue (ms): %s; job timings_ms (median/mean): %s",
		ms(median(totals)), joinMS(totals), strings.Join(queue, " "), stepSummary(appl))

	// Point-in-time restore to just after a marker row; a second row after that time must be gone.
	if err := execSQL(ctx, c.Connections.DirectURL, "CREATE TABLE bench_marker (v text)", "INSERT INTO bench_marker VALUES ('kept')"); err != nil {
		b.Fatal(err)
	}
	var noted time.Time
	if err := queryRow(ctx, c.Connections.DirectURL, "SELECT clock_timestamp()", &noted); err != nil {
		b.Fatal(err)
	}
	if err := execSQL(ctx, c.Connections.DirectURL, "INSERT INTO bench_marker VALUES ('dropped')"); err != nil {
		b.Fatal(err)
	}
	syscall.Sync()
	t0 := time.Now()
	rres, err := e.Svc.Backups().Restore(ctx, p, prj.ID, &appliance.RestoreRequest{RestoreTime: noted.UTC().Format(time.RFC3339Nano)})
	if err != nil {
		b.Fatal(err)
	}
	rj, err := waitBenchJob(ctx, e, rres.Job.ID)
	if err != nil {
		b.Fatal(err)
	}
	restoreTotal := time.Since(t0)
	var rr struct {
		Timings     map[string]float64 `json:"timings_ms"`
		BackupJobID string             `json:"backup_job_id"`
	}
	if err := json.Unmarshal(rj.Result, &rr); err != nil {
		b.Fatalf("restore job result %s: %v", rj.Result, err)
	}
	var marker string
	if err := queryRow(ctx, c.Connections.DirectURL, "SELECT coalesce(string_agg(v, ',' ORDER BY v), '') FROM bench_marker", &marker); err != nil {
		b.Fatal(err)
	}
	if marker != "kept" {
		b.Fatalf("after the restore to %s: marker rows %q, want \"kept\"", noted.UTC().Format(time.RFC3339Nano), marker)
	}
	// pgbench's tables belong to the admin role: count as the admin, over the connection the job uses.
	adminCfg, err := pgx.ParseConfig(fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=%s sslmode=disable", inst.Port, postgres.AdminRole, prj.DatabaseName))
	if err != nil {
		b.Fatal(err)
	}
	adminCfg.Password = string(adminPW)
	var accounts int64
	if err := queryRowConfig(ctx, adminCfg, "SELECT count(*) FROM pgbench_accounts", &accounts); err != nil {
		b.Fatal(err)
	}
	if accounts != int64(scale)*100000 {
		b.Fatalf("after the restore: %d rows in pgbench_accounts, want %d", accounts, scale*100000)
	}
	b.ReportMetric(restoreTotal.Seconds(), "pitr-s")
	b.Logf("point-in-time restore, RestoreProject -> completed: %.0f ms (queue %.0f ms); job timings_ms: %s; marker and %d pgbench_accounts rows checked",
		ms(restoreTotal), ms(rj.StartedAt.Sub(t0)), timingsLine(rr.Timings), accounts)

	// The restore enqueues a base backup of the new timeline: wait for it, so the Env stops idle.
	if rr.BackupJobID != "" {
		t1 := time.Now()
		bj, err := waitBenchJob(ctx, e, rr.BackupJobID)
		if err != nil {
			b.Fatal(err)
		}
		var br applianceBackup
		_ = json.Unmarshal(bj.Result, &br.result)
		b.Logf("backup enqueued by the restore, completed %.0f ms after the restore: timings_ms %s", ms(time.Since(t1)), timingsLine(br.result.Timings))
	}
	b.Logf("load average after: %s", loadavg())
}

type applianceBackup struct {
	total  time.Duration // CreateBackup called -> the job seen completed
	queue  time.Duration // CreateBackup called -> the job started
	result struct {
		SizeBytes         int64              `json:"size_bytes"`
		VerificationState string             `json:"verification_state"`
		Timings           map[string]float64 `json:"timings_ms"`
	}
}

// waitBenchJob polls the job every pollInterval until it ends; a failed job is an error.
func waitBenchJob(ctx context.Context, e *appliancetest.Env, id string) (*store.Job, error) {
	deadline := time.Now().Add(backupJobWait)
	for {
		var j *store.Job
		if err := e.DB.View(func(tx *store.Tx) (err error) { j, err = store.Jobs.Get(tx, id); return err }); err != nil {
			return nil, err
		}
		switch j.State {
		case scheduler.StateCompleted:
			return j, nil
		case scheduler.StateFailed:
			return nil, fmt.Errorf("%s job failed: %s\nstderr: %s", j.Type, j.Error, j.LastStderr)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s job still %s after %s", j.Type, j.State, backupJobWait)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(pollInterval):
		}
	}
}

// runAs runs a program as the instances' OS user (as the job runs its commands) and returns its output.
func runAs(u *daemon.OSUser, env []string, program string, args ...string) (string, error) {
	cmd := u.Command(program, args...)
	cmd.Env = append(cmd.Env, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// queryRow runs one query over a URL the API handed out and scans its single row.
func queryRow(ctx context.Context, url, q string, dst ...any) error {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return err
	}
	return queryRowConfig(ctx, cfg, q, dst...)
}

func queryRowConfig(ctx context.Context, cfg *pgx.ConnConfig, q string, dst ...any) error {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := conn.QueryRow(ctx, q).Scan(dst...); err != nil {
		return fmt.Errorf("%s: %w", q, err)
	}
	return nil
}

// execSQL runs statements, each committed on its own, over a URL the API handed out.
func execSQL(ctx context.Context, url string, stmts ...string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, q := range stmts {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// treeSize is the total size of the regular files under dir (as backup.Store.BackupSize counts).
func treeSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	})
	return n, err
}

func envInt(b *testing.B, name string, def int) int { return envAtLeast(b, name, def, 1) }

// envAtLeast is the integer in the environment variable name (def when unset), refusing one below least.
func envAtLeast(b *testing.B, name string, def, least int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < least {
		b.Fatalf("%s=%q: want an integer of at least %d", name, v, least)
	}
	return n
}

// median of durations (the lower middle one for an even count).
func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

func joinMS(ds []time.Duration) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = fmt.Sprintf("%.0f", ms(d))
	}
	return strings.Join(parts, " ")
}

// stepSummary is the median and mean of each timings_ms step over the appliance's backups.
func stepSummary(appl []applianceBackup) string {
	steps := map[string][]float64{}
	for _, a := range appl {
		for k, v := range a.result.Timings {
			steps[k] = append(steps[k], v)
		}
	}
	var parts []string
	for _, k := range backupSteps(steps) {
		v := steps[k]
		slices.Sort(v)
		sum := 0.0
		for _, x := range v {
			sum += x
		}
		parts = append(parts, fmt.Sprintf("%s %.0f/%.0f", k, v[(len(v)-1)/2], sum/float64(len(v))))
	}
	return strings.Join(parts, ", ")
}

func timingsLine(t map[string]float64) string {
	var parts []string
	for _, k := range backupSteps(t) {
		parts = append(parts, fmt.Sprintf("%s %.0f", k, t[k]))
	}
	return strings.Join(parts, ", ")
}

// backupSteps orders step names as the backup and restore jobs run them; unknown ones go last.
func backupSteps[V any](m map[string]V) []string {
	order := []string{"archive", "prepare", "basebackup", "record", "verify", "recover", "swap", "finish"}
	rank := func(k string) int {
		if i := slices.Index(order, k); i >= 0 {
			return i
		}
		return len(order)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if d := rank(a) - rank(b); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	return keys
}

func runOrder(rounds int) string {
	var s []string
	for r := range rounds {
		if r%2 == 0 {
			s = append(s, "A", "H")
		} else {
			s = append(s, "H", "A")
		}
	}
	return strings.Join(s, " ")
}
