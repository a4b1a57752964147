package acceptance

import (
	"context"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/appliancetest"
)

// BenchmarkRecover (issue 27, Performance; a measurement, not a test: it asserts no time) times the
// disaster recovery of a whole appliance from its bucket with the real binary: BENCH_RECOVER_PROJECTS
// (default 10) projects of about BENCH_RECOVER_MB (default 100) MiB of md5 text rows each, one base backup
// each, then the machine lost (SIGKILL, data directory deleted); `appliance recover` (with --parallel
// BENCH_RECOVER_PARALLEL, default recover's own) into a new directory, then `up`, until every project is
// active and answers a count of its rows over direct_url. The goal: all serving within 2 minutes
// on this machine. Each iteration recovers into a new directory from the same bucket. It lives here
// rather than in bench/ because it drives the real binary with this package's e2e helpers. See
// bench/README.md, "Backups in a bucket (issue 27)".
//
//	go test ./acceptance/ -run '^$' -bench Recover -benchtime 1x -timeout 60m
func BenchmarkRecover(b *testing.B) {
	n := benchEnvInt(b, "BENCH_RECOVER_PROJECTS", 10)
	sizeMB := benchEnvInt(b, "BENCH_RECOVER_MB", 100)
	var recoverArgs []string
	if os.Getenv("BENCH_RECOVER_PARALLEL") != "" {
		recoverArgs = []string{"--parallel", strconv.Itoa(benchEnvInt(b, "BENCH_RECOVER_PARALLEL", 1))}
	}
	b.Logf("load average before: %s", benchLoad())
	bk := e2eBucket(b)
	bin := e2eBuild(b)

	dataDir := appliancetest.TraversableTempDir(b)
	p, _, keyFile := bk.start(b, bin, dataDir)
	key := e2eAdminKey(b, dataDir)

	rows := int64(sizeMB) * (1 << 20) / 134 // about 134 bytes a row on disk
	ids := make([]string, n)
	counts := map[string]int64{}
	var dbMB float64
	tSetup := time.Now()
	for i := range ids {
		ids[i] = p.e2eProvision(b, key, "recover bench "+strconv.Itoa(i))
		url := p.connections(b, key, ids[i]).DirectURL
		dbMB += fillBenchTable(b, url, rows)
		counts[ids[i]] = rows
		bj := p.call(b, key, http.MethodPost, "/v1/projects/"+ids[i]+"/backups", map[string]any{"label": "base"}, http.StatusAccepted)
		if j := waitJobFor(b, p, key, bj.ID, 20*time.Minute); j.State != "completed" {
			b.Fatalf("backup of %s %s: %q\n%s", ids[i], j.State, j.Error, j.LastStderr)
		}
		// Rows after the backup: only the WAL archive has them (if archived before the loss).
		e2eSQL(b, url, false, "INSERT INTO bench_md5 SELECT g, 'after the backup' FROM generate_series(-100, -1) g")
	}
	// A metadata snapshot after every change.
	bk.snapshotEverything(b, p, key, ids[0])
	b.Logf("%d projects, %.0f MB of databases in all, %d md5 rows each, backed up in %.0f s", n, dbMB, rows, time.Since(tSetup).Seconds())

	// The machine is lost.
	loseMachine(b, p)
	syscall.Sync()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		loadAtLoss := benchLoad()
		newDir := appliancetest.TraversableTempDir(b)
		b.Cleanup(func() { e2eKillUnder(b, newDir) })
		b.StartTimer()
		t0 := time.Now()
		out, err := bk.recover(b, 30*time.Minute, bin, newDir, keyFile, recoverArgs...)
		recoverTime := time.Since(t0)
		if err != nil {
			b.Fatalf("recover: %v\n%s", err, out)
		}
		restored := regexp.MustCompile(`project \S+ \(recover bench \d+\): restored from base backup`).FindAllString(out, -1)
		if len(restored) != n {
			b.Fatalf("recover restored %d projects of %d:\n%s", len(restored), n, out)
		}
		t1 := time.Now()
		q := e2eStartWith(b, bin, newDir, bk.env, bk.flags())
		upAnswers := time.Since(t1)
		serving := map[string]time.Duration{}
		e2eEventually(b, 30*time.Minute, "every project serving", func() (bool, string) {
			for _, id := range ids {
				if _, ok := serving[id]; ok {
					continue
				}
				if prj := q.project(b, key, id); prj.State != "active" || prj.RuntimeStatus != "active" {
					return false, id + ": " + prj.State + "/" + prj.RuntimeStatus
				}
				ctx, cancel := context.WithTimeout(b.Context(), 20*time.Second)
				conn := e2eConnect(ctx, b, q.connections(b, key, id).DirectURL, false)
				var got int64
				err := conn.QueryRow(ctx, "SELECT count(*) FILTER (WHERE id > 0) FROM bench_md5").Scan(&got)
				conn.Close(context.Background())
				cancel()
				if err != nil {
					return false, id + ": " + err.Error()
				}
				if got != counts[id] {
					b.Fatalf("%s: %d rows after the recovery, want %d", id, got, counts[id])
				}
				serving[id] = time.Since(t0)
			}
			return true, ""
		})
		total := time.Since(t0)
		b.StopTimer()
		var each []string
		for _, id := range ids {
			each = append(each, strconv.FormatFloat(serving[id].Seconds(), 'f', 1, 64))
		}
		b.Logf("load average at the loss: %s, after: %s", loadAtLoss, benchLoad())
		b.Logf("recover: %.1f s (%.1f MB/s of databases); up answering /healthz %.1f s later; every project serving %.1f s after recover started (goal 120 s); each project serving at (s): %s",
			recoverTime.Seconds(), dbMB/recoverTime.Seconds(), upAnswers.Seconds(), total.Seconds(), strings.Join(each, " "))
		b.Logf("recover's report:\n%s", out)
		b.ReportMetric(recoverTime.Seconds(), "recover-s")
		b.ReportMetric(dbMB/recoverTime.Seconds(), "MB/s")
		b.ReportMetric(upAnswers.Seconds(), "up-answers-s")
		b.ReportMetric(total.Seconds(), "all-serving-s")
		b.ReportMetric(dbMB, "db-MB")
		q.stop(b, syscall.SIGTERM)
		e2eKillUnder(b, newDir)
		b.StartTimer()
	}
}

func benchEnvInt(t testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// benchLoad is /proc/loadavg's 1, 5 and 15 minute averages.
func benchLoad() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// fillBenchTable fills the database at url with the benchmarks' table of md5 text (rows rows, about 134
// bytes each on disk) and returns the database's size in MB.
func fillBenchTable(b *testing.B, url string, rows int64) float64 {
	b.Helper()
	ctx, cancel := context.WithTimeout(b.Context(), 10*time.Minute)
	defer cancel()
	conn := e2eConnect(ctx, b, url, false)
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `CREATE TABLE bench_md5 AS SELECT g AS id, md5(g::text) || md5((-g)::text) || md5((g + 1000000000)::text) AS v
		FROM generate_series(1::int8, $1::int8) g`, rows); err != nil {
		b.Fatal(err)
	}
	var size int64
	if err := conn.QueryRow(ctx, "SELECT pg_database_size(current_database())").Scan(&size); err != nil {
		b.Fatal(err)
	}
	return float64(size) / (1 << 20)
}
