package cmd_test

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/backup/s3store/s3test"
)

// TestRecoverBench (issue 27, Performance; a measurement, not a test: it runs only with BENCH_RECOVER=1
// and asserts no time) times the disaster recovery of a whole appliance from its bucket with the real
// binary: BENCH_RECOVER_PROJECTS (default 10) projects of about BENCH_RECOVER_MB (default 100) MiB of md5
// text rows each, one base backup each, then the machine lost (SIGKILL, data directory deleted);
// `appliance recover` into a new directory, then `up`, until every project is active and answers a count
// of its rows over direct_url. The goal: all serving within 2 minutes on this machine. It lives
// here rather than in bench/ because it drives the real binary with this package's e2e helpers. See
// bench/README.md, "Backups in a bucket (issue 27)".
//
//	BENCH_RECOVER=1 go test ./cmd/ -run '^TestRecoverBench$' -v -timeout 60m
func TestRecoverBench(t *testing.T) {
	if os.Getenv("BENCH_RECOVER") == "" {
		t.Skip("a measurement: set BENCH_RECOVER=1 (bench/README.md)")
	}
	n := benchEnvInt(t, "BENCH_RECOVER_PROJECTS", 10)
	sizeMB := benchEnvInt(t, "BENCH_RECOVER_MB", 100)
	t.Logf("load average before: %s", benchLoad())
	srv := s3test.Start(t)
	bin := e2eBuild(t)
	env := []string{"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey}
	flags := []string{"--backup-store", "s3://" + srv.Bucket + "/appl", "--backup-store-endpoint", "http://" + srv.Addr,
		"--backup-store-path-style", "--backup-store-region", "us-east-1"}

	dataDir := appliancetest.TraversableTempDir(t)
	t.Cleanup(func() { e2eKillUnder(t, dataDir) })
	p := e2eStartWith(t, bin, dataDir, env, flags)
	m := regexp.MustCompile(`(?m)^  recovery_key: ([0-9a-f]{64})$`).FindStringSubmatch(p.stdout.String())
	if m == nil {
		t.Fatalf("the first start with a bucket shows no recovery key:\n%s", p.stdout)
	}
	keyFile := t.TempDir() + "/recovery.key"
	if err := os.WriteFile(keyFile, []byte(m[1]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	key := e2eAdminKey(t, dataDir)

	rows := int64(sizeMB) * (1 << 20) / 134 // about 134 bytes a row on disk
	ids := make([]string, n)
	counts := map[string]int64{}
	var dbMB float64
	tSetup := time.Now()
	for i := range ids {
		ids[i] = p.e2eProvision(t, key, "recover bench "+strconv.Itoa(i))
		url := p.connections(t, key, ids[i]).DirectURL
		func() {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
			defer cancel()
			conn := e2eConnect(ctx, t, url, false)
			defer conn.Close(context.Background())
			if _, err := conn.Exec(ctx, `CREATE TABLE bench_md5 AS SELECT g AS id, md5(g::text) || md5((-g)::text) || md5((g + 1000000000)::text) AS v
				FROM generate_series(1::int8, $1::int8) g`, rows); err != nil {
				t.Fatal(err)
			}
			var size int64
			if err := conn.QueryRow(ctx, "SELECT pg_database_size(current_database())").Scan(&size); err != nil {
				t.Fatal(err)
			}
			dbMB += float64(size) / (1 << 20)
		}()
		counts[ids[i]] = rows
		bj := p.call(t, key, http.MethodPost, "/v1/projects/"+ids[i]+"/backups", map[string]any{"label": "base"}, http.StatusAccepted)
		if j := waitJobFor(t, p, key, bj.ID, 20*time.Minute); j.State != "completed" {
			t.Fatalf("backup of %s %s: %q\n%s", ids[i], j.State, j.Error, j.LastStderr)
		}
		// Rows after the backup: only the WAL archive has them (if archived before the loss).
		e2eSQL(t, url, false, "INSERT INTO bench_md5 SELECT g, 'after the backup' FROM generate_series(-100, -1) g")
	}
	// A metadata snapshot after every change.
	mark := time.Now().UTC().Format("20060102T150405.000000000Z")
	p.do(t, key, http.MethodPost, "/v1/projects/"+ids[0]+"/restore-points", map[string]any{"label": "before the loss"}, http.StatusCreated, nil)
	manifests := "appl/meta/manifests/"
	e2eEventually(t, time.Minute, "a metadata snapshot after "+mark, func() (bool, string) {
		newest := ""
		for o := range srv.Client().ListObjects(t.Context(), srv.Bucket, minio.ListObjectsOptions{Prefix: manifests}) {
			if o.Err != nil {
				return false, o.Err.Error()
			}
			if id := strings.TrimSuffix(strings.TrimPrefix(o.Key, manifests), ".json"); id > newest {
				newest = id
			}
		}
		return newest > mark, "newest: " + newest
	})
	t.Logf("%d projects, %.0f MB of databases in all, %d md5 rows each, backed up in %.0f s", n, dbMB, rows, time.Since(tSetup).Seconds())

	// The machine is lost.
	p.stop(t, syscall.SIGKILL)
	e2eKillUnder(t, dataDir)
	if err := os.RemoveAll(dataDir); err != nil {
		t.Fatal(err)
	}
	syscall.Sync()
	loadAtLoss := benchLoad()

	newDir := appliancetest.TraversableTempDir(t)
	t.Cleanup(func() { e2eKillUnder(t, newDir) })
	t0 := time.Now()
	c := exec.Command(bin, append([]string{"recover", "--data-dir", newDir, "--pg-ports", e2ePorts(newDir), "--recovery-key", keyFile}, flags...)...)
	c.Env = append(os.Environ(), env...)
	out, err := runWithin(t, c, 30*time.Minute)
	recoverTime := time.Since(t0)
	if err != nil {
		t.Fatalf("recover: %v\n%s", err, out)
	}
	restored := regexp.MustCompile(`project \S+ \(recover bench \d+\): restored from base backup`).FindAllString(out, -1)
	if len(restored) != n {
		t.Fatalf("recover restored %d projects of %d:\n%s", len(restored), n, out)
	}
	t1 := time.Now()
	q := e2eStartWith(t, bin, newDir, env, flags)
	upAnswers := time.Since(t1)
	serving := map[string]time.Duration{}
	e2eEventually(t, 30*time.Minute, "every project serving", func() (bool, string) {
		for _, id := range ids {
			if _, ok := serving[id]; ok {
				continue
			}
			if prj := q.project(t, key, id); prj.State != "active" || prj.RuntimeStatus != "active" {
				return false, id + ": " + prj.State + "/" + prj.RuntimeStatus
			}
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			conn := e2eConnect(ctx, t, q.connections(t, key, id).DirectURL, false)
			var got int64
			err := conn.QueryRow(ctx, "SELECT count(*) FILTER (WHERE id > 0) FROM bench_md5").Scan(&got)
			conn.Close(context.Background())
			cancel()
			if err != nil {
				return false, id + ": " + err.Error()
			}
			if got != counts[id] {
				t.Fatalf("%s: %d rows after the recovery, want %d", id, got, counts[id])
			}
			serving[id] = time.Since(t0)
		}
		return true, ""
	})
	total := time.Since(t0)
	var each []string
	for _, id := range ids {
		each = append(each, strconv.FormatFloat(serving[id].Seconds(), 'f', 1, 64))
	}
	t.Logf("load average at the loss: %s, after: %s", loadAtLoss, benchLoad())
	t.Logf("recover: %.1f s (%.1f MB/s of databases); up answering /healthz %.1f s later; every project serving %.1f s after recover started (goal 120 s); each project serving at (s): %s",
		recoverTime.Seconds(), dbMB/recoverTime.Seconds(), upAnswers.Seconds(), total.Seconds(), strings.Join(each, " "))
	t.Logf("recover's report:\n%s", out)
	q.stop(t, syscall.SIGTERM)
}

func benchEnvInt(t *testing.T, name string, def int) int {
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
