package acceptance

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/backup/metasnap"
	"github.com/theappliance/appliance/appliance/backup/s3store"
	"github.com/theappliance/appliance/store"
)

// TestRecoverFromBucket loses a whole appliance and rebuilds it from its bucket with the real binary on a
// real S3 server (versitygw): two projects with a base backup each and rows written after it (WAL replay
// must bring them back), a third whose base backups are lost from the bucket (up may have taken a first
// one); the appliance is SIGKILLed with its servers and its data directory deleted. recover refuses a
// live appliance's data directory, a non-empty one, a wrong recovery key and a tampered snapshot object,
// writing nothing each time. Then it rebuilds into a new directory with another port range, one project
// at a time, and is interrupted (SIGINT: it stops its servers and says how to go on) once the first
// project is restored and the second has its base backup in place (a test build's pause); run again, it
// keeps the first and is SIGKILLed at the same point of the second. A rerun is refused while the store
// is open elsewhere and while the bucket holds a newer metadata snapshot than the one the recovery began
// from, and, once that is gone, finishes the job with --parallel 2: the first project kept (verified,
// its server left running by the killed run), the second wiped and restored
// again, each reported (the one without a backup failed, exit status non-zero; a preview and a job
// running at the loss are not carried over). With a newer snapshot again, --start-over begins anew from
// it and restores every project once more. up on it serves the same rows (checksums) with the same
// passwords, API key and key-value token; a restore to a time after the recovery (on the timeline its
// promotion started) finds its base backup.
func TestRecoverFromBucket(t *testing.T) {
	t.Parallel()
	bk := e2eBucket(t)
	bk.env = append(bk.env, e2eNoSpares) // no spare clusters in any up of the test
	srv := bk.srv
	bin := e2eBuild(t)

	dataDir := appliancetest.TraversableTempDir(t)
	p, recoveryKey, keyFile := bk.start(t, bin, dataDir)
	key := e2eAdminKey(t, dataDir)

	names := []string{"recover a", "recover b"}
	ids := []string{p.e2eProvision(t, key, names[0]), p.e2eProvision(t, key, names[1])}
	noBackup := p.e2eProvision(t, key, "recover c")
	// A key-value store: its token must work again (its data is not this test's).
	var kvCreated struct {
		Job     *e2eJob `json:"job"`
		KVStore struct {
			Token string `json:"token"`
		} `json:"kv_store"`
	}
	p.do(t, key, http.MethodPost, "/v1/projects/"+ids[0]+"/kv", nil, http.StatusAccepted, &kvCreated)
	if j := p.waitJob(t, key, kvCreated.Job.ID); j.State != "completed" {
		t.Fatalf("kv.create %s: %s", j.State, j.Error)
	}
	conns := map[string]e2eConnections{}
	for i, id := range ids {
		conns[id] = p.connections(t, key, id)
		e2eSQL(t, conns[id].DirectURL, false, "CREATE TABLE kept (id int PRIMARY KEY, note text NOT NULL)",
			"INSERT INTO kept SELECT g, 'before the backup "+names[i]+" '||g FROM generate_series(1, 500) g")
		bj := p.call(t, key, http.MethodPost, "/v1/projects/"+id+"/backups", map[string]any{"label": "base"}, http.StatusAccepted)
		if j := waitJobFor(t, p, key, bj.ID, restoreDeadline); j.State != "completed" {
			t.Fatalf("backup of %s %s: %q\n%s", id, j.State, j.Error, j.LastStderr)
		}
	}
	// Rows after the backups: only the WAL archive has them. Then enough WAL to fill the segment they are
	// in (its commit is in a later one, so the filler itself is not recovered), and wait until the
	// archiver stored the segment of the rows (pg_stat_archiver).
	sums := map[string]string{}
	for i, id := range ids {
		e2eSQL(t, conns[id].DirectURL, false,
			"INSERT INTO kept SELECT g, 'after the backup "+names[i]+" '||g FROM generate_series(501, 1500) g",
			"UPDATE kept SET note = note || ' (updated)' WHERE id % 7 = 0",
			"DELETE FROM kept WHERE id % 11 = 0")
		sums[id] = recoverChecksum(t, conns[id].DirectURL)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		conn := e2eConnect(ctx, t, conns[id].DirectURL, false)
		var seg string
		if err := conn.QueryRow(ctx, "SELECT pg_walfile_name(pg_current_wal_lsn())").Scan(&seg); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "CREATE TABLE filler AS SELECT g, md5(g::text) || repeat('x', 900) AS pad FROM generate_series(1, 20000) g"); err != nil {
			t.Fatal(err)
		}
		e2eEventually(t, time.Minute, "segment "+seg+" of "+id+" archived", func() (bool, string) {
			var last *string
			if err := conn.QueryRow(ctx, "SELECT last_archived_wal FROM pg_stat_archiver").Scan(&last); err != nil {
				return false, err.Error()
			}
			if last == nil {
				return false, "nothing archived yet"
			}
			return *last >= seg, "last archived: " + *last
		})
		conn.Close(context.Background())
		cancel()
	}
	// A preview of the first project (disposable: not rebuilt).
	var pv struct {
		Job     *e2eJob `json:"job"`
		Preview struct {
			ID string `json:"id"`
		} `json:"preview"`
	}
	p.do(t, key, http.MethodPost, "/v1/projects/"+ids[0]+"/preview-databases", map[string]any{"name": "before the loss"}, http.StatusAccepted, &pv)
	if j := waitJobFor(t, p, key, pv.Job.ID, restoreDeadline); j.State != "completed" {
		t.Fatalf("preview %s: %q", j.State, j.Error)
	}
	// A job running when the machine is lost.
	sleepMarker := filepath.Join(t.TempDir(), "sleep.marker")
	inFlight := p.enqueueSleep(t, key, 600, sleepMarker)
	e2eWaitLines(t, sleepMarker, 1)
	// A metadata snapshot taken after every change the test made.
	bk.snapshotEverything(t, p, key, ids[0])

	// recover refuses a live appliance's data directory, writing nothing.
	if out, err := bk.recover(t, 2*time.Minute, bin, dataDir, keyFile); err == nil || !strings.Contains(out, "holds a meta.db and no unfinished recovery") {
		t.Fatalf("recover into a live appliance's data directory: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "recovery-progress.json")); !os.IsNotExist(err) {
		t.Fatalf("recover into a live appliance's data directory wrote its record (%v)", err)
	}

	// The machine is lost: the appliance and its servers killed, the data directory gone.
	oldPorts := map[string]string{}
	for _, id := range ids {
		u, _ := url.Parse(conns[id].DirectURL)
		oldPorts[id] = u.Port()
	}
	loseMachine(t, p)
	newest, err := bk.newestSnapshot(t) // up may have taken one more since
	if err != nil {
		t.Fatal(err)
	}

	newDir := appliancetest.TraversableTempDir(t)
	t.Cleanup(func() { e2eKillUnder(t, newDir) })
	runRecover := func(dir, keyFile string, args ...string) (string, error) {
		return bk.recover(t, 10*time.Minute, bin, dir, keyFile, args...)
	}
	empty := func(what string) {
		t.Helper()
		if entries, err := os.ReadDir(newDir); err != nil || len(entries) > 0 {
			t.Fatalf("%s: the data directory is not left empty (%v): %v", what, err, entries)
		}
	}
	// A data directory that holds anything is refused.
	busy := appliancetest.TraversableTempDir(t)
	if err := os.WriteFile(filepath.Join(busy, "something"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := runRecover(busy, keyFile); err == nil || !strings.Contains(out, "is not empty") || !strings.Contains(out, "no unfinished recovery") {
		t.Fatalf("recover into a non-empty directory: %v\n%s", err, out)
	}
	// A wrong recovery key: refused before anything is written.
	wrongKey := filepath.Join(t.TempDir(), "wrong.key")
	other := make([]byte, 32)
	rand.Read(other)
	if err := os.WriteFile(wrongKey, []byte(hex.EncodeToString(other)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := runRecover(newDir, wrongKey); err == nil || !strings.Contains(out, "does not authenticate") || !strings.Contains(out, "recovery key") {
		t.Fatalf("recover with a wrong recovery key: %v\n%s", err, out)
	}
	empty("a wrong recovery key")
	// A truncated object of the newest snapshot: refused, naming it; nothing written. Then put back.
	tampered := "appl/meta/snapshots/" + newest + "/files/secret.key"
	obj, err := srv.Client().GetObject(t.Context(), srv.Bucket, tampered, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	original, err := io.ReadAll(obj)
	obj.Close()
	if err != nil {
		t.Fatal(err)
	}
	put := func(data []byte) {
		t.Helper()
		if _, err := srv.Client().PutObject(t.Context(), srv.Bucket, tampered, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	put(original[:len(original)-7])
	if out, err := runRecover(newDir, keyFile); err == nil || !strings.Contains(out, strings.TrimPrefix(tampered, "appl/")) || !strings.Contains(out, "does not authenticate") {
		t.Fatalf("recover with a truncated snapshot object: %v\n%s", err, out)
	}
	empty("a truncated snapshot object")
	put(original)

	// The third project's base backups are lost from the bucket (with a bucket, up takes a first backup of
	// a project that has none, at its next scheduled-backups run: whether it came before the loss depends
	// on the timing): it cannot be rebuilt, and recover goes on with the others.
	for o := range srv.Client().ListObjects(t.Context(), srv.Bucket, minio.ListObjectsOptions{Prefix: "appl/" + noBackup + "/base/", Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		if err := srv.Client().RemoveObject(t.Context(), srv.Bucket, o.Key, minio.RemoveObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// The recovery, one project at a time, stopped with the second project's base backup in its new
	// directory (a test build's pause): first by SIGINT (recover stops what it started and says how to go
	// on), then, rerun, by SIGKILL (its servers left running, as when the machine goes with it).
	startPaused := func(pause int) (*exec.Cmd, *e2eBuffer, string) {
		marker := filepath.Join(t.TempDir(), "recover.marker")
		c := bk.recoverCmd(t, bin, newDir, keyFile, "--parallel", "1")
		c.Env = append(c.Env, "APPLIANCE_TEST_RECOVER_PAUSE="+strconv.Itoa(pause), "APPLIANCE_TEST_RECOVER_PAUSE_MARKER="+marker)
		out := &e2eBuffer{}
		c.Stdout, c.Stderr = out, out
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		e2eWaitLines(t, marker, 1)
		if paused, _ := os.ReadFile(marker); string(paused) != ids[1]+" base-fetched\n" {
			t.Fatalf("recover paused at %q, want %s's base-fetched:\n%s", paused, ids[1], out)
		}
		return c, out, marker
	}
	restoredLine := func(id string) *regexp.Regexp {
		return regexp.MustCompile(`project ` + id + ` \(recover .\): restored from base backup \S+ to LSN [0-9A-F]+/[0-9A-F]+ \(last transaction \S+\), now on timeline [2-9]`)
	}
	keptLine := func(id string) *regexp.Regexp {
		return regexp.MustCompile(`project ` + id + ` \(recover .\): kept: restored by an earlier run from base backup \S+ to LSN [0-9A-F]+/[0-9A-F]+ \(last transaction \S+\), verified running on timeline [2-9]`)
	}
	first, firstOut, _ := startPaused(2)
	first.Process.Signal(os.Interrupt)
	err = first.Wait()
	t.Logf("recover, interrupted:\n%s", firstOut)
	if err == nil || !restoredLine(ids[0]).MatchString(firstOut.String()) ||
		!strings.Contains(firstOut.String(), "recover interrupted (context canceled): 1 projects restored, 0 failed, 2 not done; run the same command again to finish") {
		t.Fatalf("recover interrupted with %s restored: %v\n%s", ids[0], err, firstOut)
	}
	// The servers it started are stopped before it exits; a postmaster's logger ends just after it (and the
	// postmaster's exit is reaped by its parent): a moment, not a process left running.
	e2eEventually(t, 15*time.Second, "no process left by the interrupted recover", func() (bool, string) {
		left := e2eProcsUnder(newDir)
		return len(left) == 0, fmt.Sprint(left)
	})
	second, secondOut, _ := startPaused(1) // the first project is kept: the second is the first to fetch
	second.Process.Kill()
	second.Wait()
	t.Logf("recover again, killed:\n%s", secondOut)
	if !keptLine(ids[0]).MatchString(secondOut.String()) || !strings.Contains(secondOut.String(), "(run 2)") {
		t.Fatalf("recover run again does not keep %s:\n%s", ids[0], secondOut)
	}
	record, err := os.ReadFile(filepath.Join(newDir, "recovery-progress.json"))
	if err != nil {
		t.Fatalf("the killed recover left no record: %v", err)
	}

	// A newer metadata snapshot in the bucket than the one the recovery began from: the rerun refuses,
	// naming both and --start-over, and changes nothing. (One taken of the half-recovered directory, as
	// up started on it would: the old machine still running would do the same.) While that store is open
	// here, the rerun refuses the directory as one in use.
	unchanged := func(what string) {
		t.Helper()
		if after, _ := os.ReadFile(filepath.Join(newDir, "recovery-progress.json")); !bytes.Equal(after, record) {
			t.Fatalf("%s changed the record:\n%s\nwas:\n%s", what, after, record)
		}
	}
	kb, _ := hex.DecodeString(recoveryKey)
	sc := srv.Config("appl")
	if sc.DataKey, err = metasnap.SnapshotKey(kb); err != nil {
		t.Fatal(err)
	}
	bucket, err := s3store.New(sc)
	if err != nil {
		t.Fatal(err)
	}
	snapshotOf := func(db *store.DB) *metasnap.Manifest {
		t.Helper()
		sn := &metasnap.Snapshotter{DB: db, Objects: bucket, DataDir: newDir, Files: []string{"ca/ca.crt", "ca/ca.key", "secret.key"}, Keep: 1000}
		m, err := sn.Snapshot(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	db, err := store.Open(filepath.Join(newDir, "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	newer := snapshotOf(db)
	if out, err := runRecover(newDir, keyFile); err == nil || !strings.Contains(out, "locked by another process") {
		t.Fatalf("recover into a directory whose meta.db is in use: %v\n%s", err, out)
	}
	unchanged("recover into a directory whose meta.db is in use")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if out, err := runRecover(newDir, keyFile); err == nil || !strings.Contains(out, "newest snapshot "+newer.ID) || !strings.Contains(out, "newer than") ||
		!strings.Contains(out, newest) || !strings.Contains(out, "--start-over") {
		t.Fatalf("recover with a newer metadata snapshot in the bucket: %v\n%s", err, out)
	}
	unchanged("the rerun refused for a newer snapshot")
	if err := srv.Client().RemoveObject(t.Context(), srv.Bucket, e2eManifests+newer.ID+".json", minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}

	// The rerun finishes the job: the first project kept, the second restored again, the third failed for
	// want of a backup.
	out, err := runRecover(newDir, keyFile, "--parallel", "2")
	t.Logf("recover, again:\n%s", out)
	if err == nil {
		t.Fatalf("recover with a project that has no backup exits 0:\n%s", out)
	}
	if !strings.Contains(out, "finishing the recovery in "+newDir+" (run 3) from metadata snapshot "+newest) {
		t.Fatalf("the rerun does not say it finishes the recovery from %s:\n%s", newest, out)
	}
	if !keptLine(ids[0]).MatchString(out) {
		t.Fatalf("the rerun does not keep %s:\n%s", ids[0], out)
	}
	if !restoredLine(ids[1]).MatchString(out) {
		t.Fatalf("the rerun does not restore %s:\n%s", ids[1], out)
	}
	both := firstOut.String() + secondOut.String() + out
	for _, id := range ids {
		// Another port range: every port moved, and the report says so.
		if !strings.Contains(both, "direct port "+oldPorts[id]+" → ") || !strings.Contains(both, "(outside --pg-ports "+e2ePorts(t, newDir)+")") {
			t.Fatalf("recover's report does not say the port %s of %s moved:\n%s", oldPorts[id], id, both)
		}
	}
	if !regexp.MustCompile(`project ` + noBackup + ` \(recover c\): FAILED: .*(no completed base backup|base backup)`).MatchString(out) {
		t.Fatalf("recover's report lacks the project without a backup:\n%s", out)
	}
	if !strings.Contains(out, "run the same command again") {
		t.Fatalf("recover with a failed project does not say a rerun tries it again:\n%s", out)
	}

	// A newer snapshot again (of the directory as the rerun left it), and --start-over: the unfinished
	// recovery's instances are removed, the directory emptied, and the recovery begins again from that
	// snapshot (each project on a new timeline after the first recovery's).
	func() {
		db, err := store.Open(filepath.Join(newDir, "meta.db"))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		newer = snapshotOf(db)
	}()
	out, err = runRecover(newDir, keyFile, "--start-over")
	t.Logf("recover --start-over:\n%s", out)
	if err == nil || !strings.Contains(out, "--start-over: discarding the unfinished recovery in "+newDir) || !strings.Contains(out, "metadata snapshot "+newer.ID+" (taken") {
		t.Fatalf("recover --start-over: %v\n%s", err, out)
	}
	for _, id := range ids {
		if !restoredLine(id).MatchString(out) {
			t.Fatalf("recover --start-over does not restore %s again:\n%s", id, out)
		}
	}
	if !regexp.MustCompile(`project ` + noBackup + ` \(recover c\): FAILED: `).MatchString(out) {
		t.Fatalf("recover --start-over: the project without a backup is not reported failed:\n%s", out)
	}

	// up on the recovered directory serves every project again: same rows, same password, same API key.
	q := e2eStartWith(t, bin, newDir, bk.env, bk.flags())
	if strings.Contains(q.stdout.String(), "recovery_key:") {
		t.Fatalf("up after recover made a new recovery key:\n%s", q.stdout)
	}
	for _, id := range ids {
		e2eEventually(t, 2*time.Minute, id+" active", func() (bool, string) {
			prj := q.project(t, key, id)
			return prj.State == "active" && prj.RuntimeStatus == "active", prj.State + "/" + prj.RuntimeStatus
		})
		c := q.connections(t, key, id)
		before, _ := url.Parse(conns[id].DirectURL)
		after, _ := url.Parse(c.DirectURL)
		pw, _ := before.User.Password()
		if got, _ := after.User.Password(); got != pw || after.User.Username() != before.User.Username() {
			t.Fatalf("%s: the credential changed across the recovery", id)
		}
		if after.Port() == before.Port() {
			t.Fatalf("%s: still on port %s, outside the new range %s", id, after.Port(), e2ePorts(t, newDir))
		}
		if got := recoverChecksum(t, c.DirectURL); got != sums[id] {
			t.Fatalf("%s: rows after the recovery %s, before the loss %s", id, got, sums[id])
		}
		if got := recoverChecksum(t, c.PooledURL); got != sums[id] {
			t.Fatalf("%s: rows through the pooler after the recovery %s, before the loss %s", id, got, sums[id])
		}
	}
	// A restore to a time after the recovery: on the timeline the promotion started, which has no base
	// backup of its own (the recovery's switch record names the backup it came from).
	c := q.connections(t, key, ids[0])
	e2eSQL(t, c.DirectURL, false, "CREATE TABLE later (id int PRIMARY KEY)", "INSERT INTO later VALUES (1)")
	var target time.Time
	func() {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		conn := e2eConnect(ctx, t, c.DirectURL, false)
		defer conn.Close(context.Background())
		if err := conn.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&target); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "INSERT INTO later VALUES (2)"); err != nil {
			t.Fatal(err)
		}
	}()
	rj := q.call(t, key, http.MethodPost, "/v1/projects/"+ids[0]+"/restores", map[string]any{"restore_time": target.UTC().Format(time.RFC3339Nano)}, http.StatusAccepted)
	if j := waitJobFor(t, q, key, rj.ID, restoreDeadline); j.State != "completed" {
		t.Fatalf("restore to %s after the recovery: %s %q\n%s", target, j.State, j.Error, j.LastStderr)
	}
	if got := recoverChecksum(t, c.DirectURL); got != sums[ids[0]] {
		t.Fatalf("after a restore to a time after the recovery: rows %s, want %s", got, sums[ids[0]])
	}
	func() {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		conn := e2eConnect(ctx, t, c.DirectURL, false)
		defer conn.Close(context.Background())
		var later string
		if err := conn.QueryRow(ctx, "SELECT string_agg(id::text, ',' ORDER BY id) FROM later").Scan(&later); err != nil || later != "1" {
			t.Fatalf("after a restore to a time after the recovery: later holds %q (%v), want 1", later, err)
		}
	}()

	var previews struct {
		PreviewDatabases []struct {
			ID string `json:"id"`
		} `json:"preview_databases"`
	}
	q.do(t, key, http.MethodGet, "/v1/projects/"+ids[0]+"/preview-databases", nil, http.StatusOK, &previews)
	if len(previews.PreviewDatabases) != 0 {
		t.Fatalf("previews after the recovery: %+v, want none (preview %s is not rebuilt)", previews.PreviewDatabases, pv.Preview.ID)
	}
	// The job that ran on the lost machine failed, saying why.
	if j := q.call(t, key, http.MethodGet, "/v1/jobs/"+inFlight.ID, nil, http.StatusOK); j.State != "failed" || !strings.Contains(j.Error, "recovered from its backup store") {
		t.Fatalf("the job running at the loss is %s (%q) after the recovery, want failed with the reason", j.State, j.Error)
	}

	kv := q.kvClient(t, key, ids[0], kvCreated.KVStore.Token)
	e2eEventually(t, e2eDeadline, "the key-value store to answer with its token", func() (bool, string) {
		if err := kv.Set(t.Context(), "after-recover", "1", 0).Err(); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	if prj := q.project(t, key, noBackup); prj.State != "failed" || !strings.HasPrefix(prj.LastError, "recover: ") {
		t.Fatalf("the project without a backup is %s (%q) after the recovery, want failed", prj.State, prj.LastError)
	}
	q.stop(t, syscall.SIGTERM)
}

// recoverChecksum is the count and MD5 of every row of the table kept, in order.
func recoverChecksum(t *testing.T, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	conn := e2eConnect(ctx, t, url, true) // the simple protocol: PgBouncer's transaction mode wants it

	defer conn.Close(context.Background())
	var sum string
	if err := conn.QueryRow(ctx, "SELECT count(*)::text || ':' || md5(string_agg(id::text || '=' || note, ',' ORDER BY id)) FROM kept").Scan(&sum); err != nil {
		t.Fatalf("checksum: %v", err)
	}
	return sum
}
