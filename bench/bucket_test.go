package bench

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/backup"
	"github.com/theappliance/appliance/appliance/backup/s3store"
	"github.com/theappliance/appliance/appliance/backup/s3store/s3test"
	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/store"
)

// bucketBench is one project of an appliance whose backup store is a bucket of a real S3 server
// (versitygw on loopback, serving a directory of the same local disk), sealed with a random data key, as
// the appliance's bucket tests build it (appliance/bucket_backups_test.go's bucketEnv).
type bucketBench struct {
	e     *appliancetest.Env
	p     *appliance.Principal
	srv   *s3test.Server
	prj   *store.Project
	inst  *store.Instance
	user  *daemon.OSUser
	pgEnv []string // the connection environment of createBackupJob
	conn  []string // -h -p -U of the instance's admin role over TCP
	admin *pgx.ConnConfig
}

func newBucketBench(b *testing.B) *bucketBench {
	ctx := b.Context()
	srv := s3test.Start(b)
	e := appliancetest.New(b, appliancetest.Options{Instances: true,
		BackupObjects: func(dir string, chown func(string) error) (backup.Objects, error) {
			cfg := srv.Config("appliance/")
			cfg.DataKey = make([]byte, 32)
			rand.Read(cfg.DataKey)
			cfg.Spool, cfg.Chown = filepath.Join(dir, "spool"), chown
			cfg.UploadState = filepath.Join(dir, "spool", "uploads") // as up has it
			o, err := s3store.New(cfg)
			if err != nil {
				return nil, err
			}
			return o, o.Check(ctx)
		}})
	p, err := e.Svc.Identity().Authenticate(ctx, e.Bootstrap.APIKey)
	if err != nil {
		b.Fatal(err)
	}
	res, err := e.Svc.CreateProject(ctx, p, &appliance.CreateProjectRequest{Name: "bucket bench", Environment: "development"})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := waitBenchJob(ctx, e, res.Job.ID); err != nil {
		b.Fatal(err)
	}
	k := &bucketBench{e: e, p: p, srv: srv, prj: e.Project(b, res.Project.ID)}
	if err := e.DB.View(func(tx *store.Tx) (err error) {
		k.inst, err = store.Instances.Get(tx, k.prj.PrimaryInstanceID)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	adminPW, err := e.Box.Open(k.inst.AdminPassword)
	if err != nil {
		b.Fatal(err)
	}
	if k.user, err = daemon.DefaultOSUser(); err != nil {
		b.Fatal(err)
	}
	k.pgEnv = []string{"PGPASSWORD=" + string(adminPW), "PGSSLMODE=disable", "PGCONNECT_TIMEOUT=10"}
	k.conn = []string{"-h", "127.0.0.1", "-p", strconv.Itoa(k.inst.Port), "-U", postgres.AdminRole}
	k.admin = e.AdminConfig(b, k.prj.ID)
	return k
}

// bin is the path of a PostgreSQL program of the instances' version.
func (k *bucketBench) bin(b *testing.B, program string) string {
	p, err := k.e.Bin.Path(program)
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// ownedDir makes a directory under the Env's, owned by the instances' OS user.
func (k *bucketBench) ownedDir(b *testing.B, name string) string {
	dir := filepath.Join(k.e.Dir, name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		b.Fatal(err)
	}
	if err := k.user.Chown(dir); err != nil {
		b.Fatal(err)
	}
	return dir
}

// bucketDir is the directory in which versitygw keeps the objects of the project under sub.
func (k *bucketBench) bucketDir(sub string) string {
	return k.srv.Path("appliance/" + k.prj.ID + "/" + sub)
}

// waitArchived switches to a new WAL segment and waits until the archiver has archived the finished one
// (archive_command returned: the bucket holds it).
func (k *bucketBench) waitArchived(ctx context.Context, conn *pgx.Conn) (time.Duration, error) {
	var seg string
	if err := conn.QueryRow(ctx, "SELECT pg_walfile_name(pg_current_wal_lsn())").Scan(&seg); err != nil {
		return 0, err
	}
	if _, err := conn.Exec(ctx, "SELECT pg_switch_wal()"); err != nil {
		return 0, err
	}
	t0 := time.Now()
	for {
		var last *string
		if err := conn.QueryRow(ctx, "SELECT last_archived_wal FROM pg_stat_archiver").Scan(&last); err != nil {
			return 0, err
		}
		if last != nil && len(*last) >= 24 && (*last)[:24] >= seg {
			return time.Since(t0), nil
		}
		if time.Since(t0) > backupJobWait {
			return 0, fmt.Errorf("segment %s not archived after %s", seg, backupJobWait)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// BenchmarkBucketBackup (issue 27): on one project loaded with about BENCH_BUCKET_MB (default 1024) MiB of
// md5 text rows (hexadecimal: compressible about 2:1, not more), side by side, alternating A H H A A H ...
// BENCH_ROUNDS (default 3) times each:
//
//   - A, the appliance's base backup into the bucket: Backups().Create (POST /v1/projects/<id>/backups)
//     until its job has completed: pg_basebackup into the local spool, pg_verifybackup, then every file
//     compressed (zstd), sealed and uploaded, manifest last;
//   - H, the reference: `pg_basebackup -Ft -z -X stream --checkpoint=fast` of the same server to a local
//     directory, as the same OS user and with the same connection.
//
// The goal: A within 1.2 times H. Everything runs once whatever b.N is: use -benchtime 1x.
func BenchmarkBucketBackup(b *testing.B) {
	sizeMB := envInt(b, "BENCH_BUCKET_MB", 1024)
	rounds := envInt(b, "BENCH_ROUNDS", 3)
	ctx := b.Context()
	loadBefore := loadavg()
	k := newBucketBench(b)
	conn, err := pgx.ConnectConfig(ctx, k.admin)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))

	// About 130 bytes a row on disk (tuple header, int, 96 hex characters, line pointer).
	rowsN := int64(sizeMB) * (1 << 20) / 134
	tLoad := time.Now()
	if _, err := conn.Exec(ctx, `CREATE TABLE bench_md5 AS SELECT g AS id, md5(g::text) || md5((-g)::text) || md5((g + 1000000000)::text) AS v
		FROM generate_series(1::int8, $1::int8) g`, rowsN); err != nil {
		b.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CHECKPOINT"); err != nil {
		b.Fatal(err)
	}
	loadTime := time.Since(tLoad)
	catchUp, err := k.waitArchived(ctx, conn)
	if err != nil {
		b.Fatal(err)
	}
	var dbBytes, walBytes int64
	if err := conn.QueryRow(ctx, "SELECT pg_database_size(current_database()), (pg_current_wal_lsn() - '0/0')::int8").Scan(&dbBytes, &walBytes); err != nil {
		b.Fatal(err)
	}
	walStored, err := treeSize(k.bucketDir("wal"))
	if err != nil {
		b.Fatal(err)
	}
	dbMB := float64(dbBytes) / (1 << 20)
	b.Logf("load average before: %s; %d md5 rows: database %.0f MB, loaded in %.1f s, archive caught up %.1f s later; WAL so far %.0f MB, in the bucket %.0f MB",
		loadBefore, rowsN, dbMB, loadTime.Seconds(), catchUp.Seconds(), float64(walBytes)/(1<<20), float64(walStored)/(1<<20))

	handRoot := k.ownedDir(b, "hand-backups")
	basebackup := k.bin(b, "pg_basebackup")
	var applTotal, applStore, applBB, hand []time.Duration
	var applStored, handStored []int64
	var applPlain int64
	var steps []applianceBackup
	runAppliance := func(r int) {
		syscall.Sync()
		t0 := time.Now()
		res, err := k.e.Svc.Backups().Create(ctx, k.p, k.prj.ID, &appliance.CreateBackupRequest{Label: fmt.Sprintf("bench %d", r)})
		if err != nil {
			b.Fatal(err)
		}
		j, err := waitBenchJob(ctx, k.e, res.Job.ID)
		if err != nil {
			b.Fatal(err)
		}
		applTotal = append(applTotal, time.Since(t0))
		var a applianceBackup
		var key struct {
			BackupKey string `json:"backup_key"`
		}
		if err := json.Unmarshal(j.Result, &a.result); err != nil {
			b.Fatalf("backup job result %s: %v", j.Result, err)
		}
		if err := json.Unmarshal(j.Result, &key); err != nil || key.BackupKey == "" {
			b.Fatalf("backup job result %s: no backup_key (%v)", j.Result, err)
		}
		if a.result.VerificationState != appliance.VerificationVerified {
			b.Fatalf("backup job result %s: want a verified backup", j.Result)
		}
		steps = append(steps, a)
		applBB = append(applBB, time.Duration(a.result.Timings["basebackup"]*float64(time.Millisecond)))
		applStore = append(applStore, time.Duration(a.result.Timings["store"]*float64(time.Millisecond)))
		applPlain = a.result.SizeBytes
		n, err := treeSize(k.bucketDir("base/" + key.BackupKey))
		if err != nil {
			b.Fatal(err)
		}
		applStored = append(applStored, n)
	}
	runHand := func(r int) {
		dir := filepath.Join(handRoot, strconv.Itoa(r))
		syscall.Sync()
		args := append([]string{"-D", dir, "-F", "t", "-z", "-X", "stream", "--checkpoint=fast", "--no-password",
			"--label", "hand " + strconv.Itoa(r)}, k.conn...)
		t0 := time.Now()
		out, err := runAs(k.user, k.pgEnv, basebackup, args...)
		d := time.Since(t0)
		if err != nil {
			b.Fatalf("pg_basebackup -Ft -z: %v\n%s", err, out)
		}
		hand = append(hand, d)
		n, err := treeSize(dir)
		if err != nil {
			b.Fatal(err)
		}
		handStored = append(handStored, n) // kept until all rounds are done, as the appliance's backups are
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

	applMed, handMed := median(applTotal), median(hand)
	ratio := applMed.Seconds() / handMed.Seconds()
	var pairs []string
	for i := range applTotal {
		pairs = append(pairs, fmt.Sprintf("%.2f", applTotal[i].Seconds()/hand[i].Seconds()))
	}
	mbps := func(d time.Duration) float64 { return dbMB / d.Seconds() }
	b.ReportMetric(dbMB, "db-MB")
	b.ReportMetric(applMed.Seconds(), "bucket-backup-s")
	b.ReportMetric(handMed.Seconds(), "basebackup-Ftz-s")
	b.ReportMetric(ratio, "bucket/Ftz-time")
	b.ReportMetric(float64(median(applTotal).Nanoseconds()), "ns/op")
	b.Logf("bucket backup (CreateBackup -> completed): median %.0f ms = %.1f MB/s (each: %s); pg_basebackup -Ft -z: median %.0f ms = %.1f MB/s (each: %s); ratio of medians %.2f, pairs %s; order %s",
		ms(applMed), mbps(applMed), joinMS(applTotal), ms(handMed), mbps(handMed), joinMS(hand), ratio, strings.Join(pairs, " "), runOrder(rounds))
	b.Logf("appliance steps: pg_basebackup (plain, spool) median %.0f ms, store (zstd + seal + upload) median %.0f ms; job timings_ms (median/mean): %s",
		ms(median(applBB)), ms(median(applStore)), stepSummary(steps))
	b.Logf("bytes: backup %.0f MB plain, %.0f MB in the bucket (%.2f of plain); pg_basebackup -Ft -z %.0f MB (%.2f of plain)",
		float64(applPlain)/(1<<20), float64(medianI(applStored))/(1<<20), float64(medianI(applStored))/float64(applPlain),
		float64(medianI(handStored))/(1<<20), float64(medianI(handStored))/float64(applPlain))
	b.Logf("load average after: %s", loadavg())
}

func medianI(xs []int64) int64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

// archiveSample is one reading of where the WAL is: written by the server, archived into the bucket,
// received by pg_receivewal.
type archiveSample struct {
	at                        time.Time
	current                   int64  // pg_current_wal_lsn as bytes
	archived                  string // pg_stat_archiver.last_archived_wal (a segment's name, or "")
	failed                    int64  // pg_stat_archiver.failed_count
	recvWrite, recvFlush      *int64 // pg_stat_replication of pg_receivewal
	recvFlushLag, recvSentLag *float64
}

var segmentName = regexp.MustCompile(`^[0-9A-F]{24}`)

// segNo is the number of the segment a WAL file name starts with (timeline apart), -1 for none.
func segNo(name string, segSize int64) int64 {
	if !segmentName.MatchString(name) {
		return -1
	}
	log, _ := strconv.ParseInt(name[8:16], 16, 64)
	seg, _ := strconv.ParseInt(name[16:24], 16, 64)
	return log*(0x100000000/segSize) + seg
}

// BenchmarkBucketArchive (issue 27): a pgbench write load (BENCH_ARCHIVE_CLIENTS clients, default 4, for
// BENCH_ARCHIVE_SECONDS, default 60, on a scale BENCH_ARCHIVE_SCALE, default 20, database) against one
// project whose WAL is archived into the bucket, with pg_receivewal streaming the same WAL to a local
// directory at the same time: side by side on the same load. Every second (BENCH_ARCHIVE_SAMPLE_MS) the
// benchmark reads the server's WAL position, pg_stat_archiver and pg_stat_replication, and reports for each:
//
//   - lag in bytes: WAL written but not yet archived (the end of the last archived segment) or not yet
//     flushed by pg_receivewal (its flush position);
//   - lag in seconds: how long the oldest finished segment that is not archived (flushed) has been
//     waiting, timed from the sample at which the server was first seen past its end (so up to one sampling interval short); 0 when none waits.
//     The same definition serves both sides (pg_receivewal without --synchronous flushes at segment ends);
//     PostgreSQL's flush_lag of pg_receivewal is reported too.
//
// The goal: the archive keeps up, lag p99 ≤ 10 s. Use -benchtime 1x.
func BenchmarkBucketArchive(b *testing.B) {
	secs := envInt(b, "BENCH_ARCHIVE_SECONDS", 60)
	clients := envInt(b, "BENCH_ARCHIVE_CLIENTS", 4)
	scale := envInt(b, "BENCH_ARCHIVE_SCALE", 20)
	every := time.Duration(envInt(b, "BENCH_ARCHIVE_SAMPLE_MS", 1000)) * time.Millisecond
	ctx := b.Context()
	loadBefore := loadavg()
	k := newBucketBench(b)
	pgbench := k.bin(b, "pgbench")
	if out, err := runAs(k.user, k.pgEnv, pgbench, append(append([]string{"-i", "-q", "-s", strconv.Itoa(scale), "-I", "dtGvp"}, k.conn...), k.prj.DatabaseName)...); err != nil {
		b.Fatalf("pgbench -i: %v\n%s", err, out)
	}
	conn, err := pgx.ConnectConfig(ctx, k.admin)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CHECKPOINT"); err != nil {
		b.Fatal(err)
	}
	if _, err := k.waitArchived(ctx, conn); err != nil {
		b.Fatal(err)
	}
	var segSize int64
	if err := conn.QueryRow(ctx, "SELECT setting::int8 FROM pg_settings WHERE name = 'wal_segment_size'").Scan(&segSize); err != nil {
		b.Fatal(err)
	}

	// pg_receivewal, as the instances' OS user, reporting its positions every second. It reports its flush
	// position only when it streams from a replication slot.
	if _, err := conn.Exec(ctx, "SELECT pg_create_physical_replication_slot('bench_receivewal', true)"); err != nil {
		b.Fatal(err)
	}
	recvDir := k.ownedDir(b, "receivewal")
	recv := k.user.Command(k.bin(b, "pg_receivewal"), append([]string{"-D", recvDir, "-S", "bench_receivewal", "-n", "--no-password", "-s", "1"}, k.conn...)...)
	recv.Env = append(recv.Env, k.pgEnv...)
	var recvOut strings.Builder
	recv.Stdout, recv.Stderr = &recvOut, &recvOut
	if err := recv.Start(); err != nil {
		b.Fatal(err)
	}
	recvDone := make(chan error, 1)
	go func() { recvDone <- recv.Wait() }()
	defer func() {
		_ = recv.Process.Signal(syscall.SIGINT)
		<-recvDone
	}()
	for deadline := time.Now().Add(30 * time.Second); ; {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_replication WHERE application_name = 'pg_receivewal' AND state = 'streaming'").Scan(&n); err != nil {
			b.Fatal(err)
		}
		if n == 1 {
			break
		}
		select {
		case err := <-recvDone:
			b.Fatalf("pg_receivewal exited: %v\n%s", err, recvOut.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.Fatalf("pg_receivewal not streaming after 30 s:\n%s", recvOut.String())
		}
	}

	read := func() archiveSample {
		s := archiveSample{}
		var archived *string
		err := conn.QueryRow(ctx, `SELECT clock_timestamp(), (pg_current_wal_lsn() - '0/0')::int8, a.last_archived_wal, a.failed_count,
				(r.write_lsn - '0/0')::int8, (r.flush_lsn - '0/0')::int8, extract(epoch FROM r.flush_lag)::float8, extract(epoch FROM r.write_lag)::float8
			FROM pg_stat_archiver a LEFT JOIN pg_stat_replication r ON r.application_name = 'pg_receivewal'`).
			Scan(&s.at, &s.current, &archived, &s.failed, &s.recvWrite, &s.recvFlush, &s.recvFlushLag, &s.recvSentLag)
		if err != nil {
			b.Fatal(err)
		}
		if archived != nil {
			s.archived = *archived
		}
		return s
	}

	// The load, sampled every second while it runs.
	bench := k.user.Command(pgbench, append(append([]string{"-c", strconv.Itoa(clients), "-j", strconv.Itoa(min(clients, 2)), "-T", strconv.Itoa(secs), "-n"}, k.conn...), k.prj.DatabaseName)...)
	bench.Env = append(bench.Env, k.pgEnv...)
	var benchOut strings.Builder
	bench.Stdout, bench.Stderr = &benchOut, &benchOut
	first := read()
	if err := bench.Start(); err != nil {
		b.Fatal(err)
	}
	benchDone := make(chan error, 1)
	go func() { benchDone <- bench.Wait() }()
	samples := []archiveSample{first}
	tick := time.NewTicker(every)
	running := true
	for running {
		select {
		case err := <-benchDone:
			if err != nil {
				b.Fatalf("pgbench: %v\n%s", err, benchOut.String())
			}
			running = false
		case <-tick.C:
		}
		samples = append(samples, read())
	}
	tick.Stop()
	end := samples[len(samples)-1]

	// Catching up: the segment in use at the end is switched out; how long until each side has it.
	var endSeg string
	if err := conn.QueryRow(ctx, "SELECT pg_walfile_name(pg_current_wal_lsn())").Scan(&endSeg); err != nil {
		b.Fatal(err)
	}
	var switched int64
	if err := conn.QueryRow(ctx, "SELECT (pg_switch_wal() - '0/0')::int8").Scan(&switched); err != nil {
		b.Fatal(err)
	}
	tSwitch := time.Now()
	var archCatch, recvCatch time.Duration
	for archCatch == 0 || recvCatch == 0 {
		s := read()
		if archCatch == 0 && s.archived != "" && s.archived[:min(24, len(s.archived))] >= endSeg {
			archCatch = time.Since(tSwitch)
		}
		if recvCatch == 0 && s.recvFlush != nil && *s.recvFlush >= switched {
			recvCatch = time.Since(tSwitch)
		}
		select {
		case err := <-recvDone:
			b.Fatalf("pg_receivewal exited: %v\n%s", err, recvOut.String())
		default:
		}
		if time.Since(tSwitch) > 2*time.Minute {
			b.Fatalf("not caught up 2 minutes after the load (archived %s, pg_receivewal flushed %v, want %s / %d)", s.archived, s.recvFlush, endSeg, switched)
		}
		time.Sleep(50 * time.Millisecond) // polling the server's progress, as waitBenchJob polls a job
	}

	// Lags per sample (the first, before the load, is the baseline).
	completed := map[int64]time.Time{} // segment -> the first sample at which the server was past its end
	var archBytes, recvBytes, archSecs, recvSecs, recvFlushLag []float64
	for _, s := range samples {
		cur := s.current / segSize
		for seg := first.current / segSize; seg < cur; seg++ {
			if _, ok := completed[seg]; !ok {
				completed[seg] = s.at
			}
		}
		waiting := func(next int64) float64 { // seconds the segment next has waited, if finished
			if next >= cur {
				return 0
			}
			if t, ok := completed[next]; ok {
				return s.at.Sub(t).Seconds()
			}
			return 0 // finished before the load began
		}
		if a := segNo(s.archived, segSize); a >= 0 {
			archBytes = append(archBytes, float64(max(0, s.current-(a+1)*segSize)))
			archSecs = append(archSecs, waiting(a+1))
		}
		if s.recvFlush != nil {
			recvBytes = append(recvBytes, float64(max(0, s.current-*s.recvFlush)))
			recvSecs = append(recvSecs, waiting(*s.recvFlush/segSize))
		}
		if s.recvFlushLag != nil {
			recvFlushLag = append(recvFlushLag, *s.recvFlushLag)
		}
	}
	elapsed := end.at.Sub(first.at).Seconds()
	walMB := float64(end.current-first.current) / (1 << 20)
	archivedMB := float64((segNo(end.archived, segSize)-segNo(first.archived, segSize))*segSize) / (1 << 20)
	tps := regexp.MustCompile(`tps = ([0-9.]+)`).FindStringSubmatch(benchOut.String())
	walStored, err := treeSize(k.bucketDir("wal"))
	if err != nil {
		b.Fatal(err)
	}
	recvStored, err := treeSize(recvDir)
	if err != nil {
		b.Fatal(err)
	}
	q := func(xs []float64, p int) float64 {
		if len(xs) == 0 {
			return -1
		}
		s := slices.Clone(xs)
		slices.Sort(s)
		return s[max((p*len(s)+99)/100, 1)-1]
	}
	b.ReportMetric(walMB/elapsed, "wal-MB/s")
	b.ReportMetric(q(archSecs, 99), "archive-lag-p99-s")
	b.ReportMetric(q(recvSecs, 99), "receivewal-lag-p99-s")
	b.ReportMetric(q(archBytes, 99)/(1<<20), "archive-lag-p99-MB")
	b.ReportMetric(q(recvBytes, 99)/(1<<20), "receivewal-lag-p99-MB")
	if len(tps) == 2 {
		b.Logf("load average before: %s; pgbench -c %d -T %d on scale %d: %s tps; WAL written %.0f MB in %.1f s = %.2f MB/s (%d samples, every %s)",
			loadBefore, clients, secs, scale, tps[1], walMB, elapsed, walMB/elapsed, len(samples), every)
	} else {
		b.Logf("load average before: %s; pgbench output without tps:\n%s", loadBefore, benchOut.String())
	}
	b.Logf("archive to the bucket: %.0f MB of segments in %.1f s = %.2f MB/s; failed_count %d -> %d; lag p50/p99/max: %.1f/%.1f/%.1f s, %.1f/%.1f/%.1f MB; caught up %.0f ms after the switch",
		archivedMB, elapsed, archivedMB/elapsed, first.failed, end.failed, q(archSecs, 50), q(archSecs, 99), q(archSecs, 100),
		q(archBytes, 50)/(1<<20), q(archBytes, 99)/(1<<20), q(archBytes, 100)/(1<<20), ms(archCatch))
	b.Logf("pg_receivewal to local disk: lag p50/p99/max: %.1f/%.1f/%.1f s, %.1f/%.1f/%.1f MB (flush position); flush_lag p50/p99 %.2f/%.2f s; caught up %.0f ms after the switch",
		q(recvSecs, 50), q(recvSecs, 99), q(recvSecs, 100), q(recvBytes, 50)/(1<<20), q(recvBytes, 99)/(1<<20), q(recvBytes, 100)/(1<<20),
		q(recvFlushLag, 50), q(recvFlushLag, 99), ms(recvCatch))
	b.Logf("stored: WAL in the bucket %.0f MB (all of the project's archive, compressed and sealed); pg_receivewal's directory %.0f MB", float64(walStored)/(1<<20), float64(recvStored)/(1<<20))
	b.Logf("load average after: %s", loadavg())
}
