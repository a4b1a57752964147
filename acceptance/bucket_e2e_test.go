package acceptance

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/backup/s3store/s3test"
)

// TestUpWithBucketBackupStore runs the real binary with `--backup-store s3://…` on a real S3 server
// (versitygw): a project archives its WAL into the bucket (through `appliance wal push`, which PostgreSQL
// runs) and a backup is stored there; `up` with a bucket that does not exist refuses to start, naming it,
// and doctor fails on it and on refused credentials.
func TestUpWithBucketBackupStore(t *testing.T) {
	t.Parallel()
	b := e2eBucket(t)
	srv, env, flags := b.srv, b.env, b.flagsFor
	bin := e2eBuild(t)

	// A bucket that does not exist: up refuses to start, naming it and the problem.
	missing := exec.Command(bin, append([]string{"up", "--data-dir", appliancetest.TraversableTempDir(t), "--listen", "127.0.0.1:0"}, flags("no-such-bucket")...)...)
	missing.Env = append(append(os.Environ(), "APPLIANCE_KV_LISTEN=127.0.0.1:0", "APPLIANCE_KV_REST_LISTEN=127.0.0.1:0"), env...)
	out, err := runWithin(t, missing, 2*time.Minute)
	if err == nil || !strings.Contains(out, "no-such-bucket") || !strings.Contains(out, "the bucket does not exist") {
		t.Fatalf("up with a missing bucket: %v\n%s", err, out)
	}

	// doctor says the same, and that the right bucket is fine.
	doctor := func(bucket string) (string, error) {
		c := exec.Command(bin, append([]string{"doctor", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0"}, flags(bucket)...)...)
		c.Env = missing.Env
		return runWithin(t, c, 2*time.Minute)
	}
	if out, err := doctor("no-such-bucket"); err == nil || !strings.Contains(out, "no-such-bucket") || !strings.Contains(out, "the bucket does not exist") {
		t.Fatalf("doctor with a missing bucket: %v\n%s", err, out)
	}
	refused := exec.Command(bin, append([]string{"doctor", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0"}, flags(srv.Bucket)...)...)
	refused.Env = append(missing.Env, "AWS_SECRET_ACCESS_KEY=not-the-secret")
	if out, err := runWithin(t, refused, 2*time.Minute); err == nil || !strings.Contains(out, "access denied") {
		t.Fatalf("doctor with refused credentials: %v\n%s", err, out)
	}
	if out, _ := doctor(srv.Bucket); !regexp.MustCompile(`(?m)^.*backup store.*s3://`+srv.Bucket+`/appl/`).MatchString(out) || strings.Contains(out, "the bucket does not exist") {
		t.Fatalf("doctor with the bucket:\n%s", out)
	}

	dataDir := appliancetest.TraversableTempDir(t)
	// The first start with a bucket makes the recovery key and shows it; backup-store recovery-key prints
	// the same.
	p, recoveryKey, _ := b.start(t, bin, dataDir)
	if out, err := exec.Command(bin, "backup-store", "recovery-key", "--data-dir", dataDir).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != recoveryKey {
		t.Fatalf("backup-store recovery-key: %v\n%s\nwant %s", err, out, recoveryKey)
	}
	// Anyone but root and the data directory's owner is refused, with a reason.
	if os.Geteuid() == 0 {
		nobodyBin := filepath.Join(appliancetest.TraversableTempDir(t), "appliance")
		data, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(nobodyBin, data, 0o755); err != nil {
			t.Fatal(err)
		}
		c := exec.Command(nobodyBin, "backup-store", "recovery-key", "--data-dir", dataDir)
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		if out, err := c.CombinedOutput(); err == nil || strings.Contains(string(out), recoveryKey) || !strings.Contains(string(out), "for root or the owner of") {
			t.Fatalf("backup-store recovery-key as uid 65534: %v\n%s", err, out)
		}
	}
	bootstrap, err := os.ReadFile(filepath.Join(dataDir, "bootstrap.json"))
	if err != nil {
		t.Fatal(err)
	}
	var creds struct {
		APIKey string `json:"api_key"`
	}
	if err := json.Unmarshal(bootstrap, &creds); err != nil {
		t.Fatal(err)
	}
	key := creds.APIKey
	prjID := p.e2eProvision(t, key, "in a bucket")
	bj := p.call(t, key, http.MethodPost, "/v1/projects/"+prjID+"/backups", map[string]any{"label": "base"}, http.StatusAccepted)
	if j := waitJobFor(t, p, key, bj.ID, restoreDeadline); j.State != "completed" {
		t.Fatalf("backup %s: %q\n%s", j.State, j.Error, j.LastStderr)
	}
	var backups struct {
		Backups []struct {
			BackupKey         string `json:"backup_key"`
			State             string `json:"state"`
			VerificationState string `json:"verification_state"`
		} `json:"backups"`
	}
	p.do(t, key, http.MethodGet, "/v1/projects/"+prjID+"/backups", nil, http.StatusOK, &backups)
	if len(backups.Backups) != 1 || backups.Backups[0].State != "completed" || backups.Backups[0].VerificationState != "verified" {
		t.Fatalf("backups: %+v", backups)
	}
	// The bucket holds the backup (its manifest) and archived WAL (the backup's end forces a segment out).
	want := []string{"appl/" + prjID + "/base/" + backups.Backups[0].BackupKey + ".backup.json", "appl/" + prjID + "/wal/"}
	deadline := time.Now().Add(time.Minute)
	for {
		var keys []string
		for o := range srv.Client().ListObjects(context.Background(), srv.Bucket, minio.ListObjectsOptions{Prefix: "appl/" + prjID + "/", Recursive: true}) {
			if o.Err != nil {
				t.Fatal(o.Err)
			}
			keys = append(keys, o.Key)
		}
		all := strings.Join(keys, "\n")
		if strings.Contains(all, want[0]) && strings.Contains(all, want[1]) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the bucket lacks %v after a minute; it holds:\n%s", want, all)
		}
		time.Sleep(100 * time.Millisecond) // polling the archiver's progress
	}
	if local, _ := filepath.Glob(filepath.Join(dataDir, "backups", prjID, "wal", "0*")); len(local) > 0 {
		t.Fatalf("WAL archived locally: %v", local)
	}

	// The metadata snapshots are in the bucket (under meta/, none in the clear); /status has their row.
	if c := p.component(t, "metadata-snapshots"); !strings.Contains(c, "last snapshot") && !strings.Contains(c, "first snapshot under way") {
		t.Fatalf("/status metadata-snapshots: %q", c)
	}
	deadline = time.Now().Add(time.Minute)
	for {
		var manifests []string
		for o := range srv.Client().ListObjects(context.Background(), srv.Bucket, minio.ListObjectsOptions{Prefix: "appl/meta/manifests/", Recursive: true}) {
			if o.Err != nil {
				t.Fatal(o.Err)
			}
			manifests = append(manifests, o.Key)
		}
		if len(manifests) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no metadata snapshot in the bucket after a minute")
		}
		time.Sleep(100 * time.Millisecond) // polling the snapshotter's progress
	}

	// A second start: the key is not shown again.
	p.stop(t, syscall.SIGTERM)
	again := e2eStartWith(t, bin, dataDir, env, b.flags())
	if strings.Contains(again.stdout.String(), "recovery_key") || strings.Contains(again.stdout.String(), recoveryKey) {
		t.Fatalf("the second start shows the recovery key again:\n%s", again.stdout)
	}
	again.stop(t, syscall.SIGTERM)
}

// runWithin runs cmd to its end (killed after d) and returns its combined output.
func runWithin(t testing.TB, cmd *exec.Cmd, d time.Duration) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	c := exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...)
	c.Env = cmd.Env
	out, err := c.CombinedOutput()
	return string(out), err
}

// bucketEnv is a real S3 server (versitygw, started by s3test) for the appliance binary: the environment
// with its credentials, and the --backup-store flags of a bucket on it (prefix appl/).
type bucketEnv struct {
	srv *s3test.Server
	env []string
}

// e2eBucket starts the S3 server (stopped at the test's end).
func e2eBucket(tb testing.TB) bucketEnv {
	srv := s3test.Start(tb)
	return bucketEnv{srv: srv, env: []string{"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey}}
}

// flagsFor is the --backup-store flags of up, recover and doctor for bucket on the server.
func (b bucketEnv) flagsFor(bucket string) []string {
	return []string{"--backup-store", "s3://" + bucket + "/appl", "--backup-store-endpoint", "http://" + b.srv.Addr,
		"--backup-store-path-style", "--backup-store-region", "us-east-1"}
}

// flags is flagsFor the server's bucket.
func (b bucketEnv) flags() []string { return b.flagsFor(b.srv.Bucket) }

// start runs the first `up` with the bucket on dataDir and returns it with the recovery key it showed
// (64 hex digits) and a file holding it.
func (b bucketEnv) start(tb testing.TB, bin, dataDir string) (p *e2eProc, recoveryKey, keyFile string) {
	tb.Helper()
	tb.Cleanup(func() { e2eKillUnder(tb, dataDir) })
	p = e2eStartWith(tb, bin, dataDir, b.env, b.flags())
	m := regexp.MustCompile(`(?m)^  recovery_key: ([0-9a-f]{64})$`).FindStringSubmatch(p.stdout.String())
	if m == nil {
		tb.Fatalf("the first start with a bucket shows no recovery key:\n%s", p.stdout)
	}
	keyFile = filepath.Join(tb.TempDir(), "recovery.key")
	if err := os.WriteFile(keyFile, []byte(m[1]+"\n"), 0o600); err != nil {
		tb.Fatal(err)
	}
	return p, m[1], keyFile
}

// recoverCmd is `appliance recover` into dir (its own port range) with keyFile, the bucket's flags and
// args.
func (b bucketEnv) recoverCmd(tb testing.TB, bin, dir, keyFile string, args ...string) *exec.Cmd {
	c := exec.Command(bin, append(append([]string{"recover", "--data-dir", dir, "--pg-ports", e2ePorts(tb, dir), "--recovery-key", keyFile}, b.flags()...), args...)...)
	c.Env = append(os.Environ(), b.env...)
	return c
}

// recover runs recoverCmd to its end (killed after within) and returns its output.
func (b bucketEnv) recover(tb testing.TB, within time.Duration, bin, dir, keyFile string, args ...string) (string, error) {
	tb.Helper()
	return runWithin(tb, b.recoverCmd(tb, bin, dir, keyFile, args...), within)
}

const e2eManifests = "appl/meta/manifests/"

// newestSnapshot is the id of the bucket's newest metadata snapshot ("" when none).
func (b bucketEnv) newestSnapshot(tb testing.TB) (string, error) {
	newest := ""
	for o := range b.srv.Client().ListObjects(tb.Context(), b.srv.Bucket, minio.ListObjectsOptions{Prefix: e2eManifests}) {
		if o.Err != nil {
			return "", o.Err
		}
		if id := strings.TrimSuffix(strings.TrimPrefix(o.Key, e2eManifests), ".json"); id > newest {
			newest = id
		}
	}
	return newest, nil
}

// snapshotEverything makes one more change on p (a restore point of project prjID) and waits until the
// bucket holds a metadata snapshot taken after it, whose id it returns: every change made before is in it.
func (b bucketEnv) snapshotEverything(tb testing.TB, p *e2eProc, key, prjID string) string {
	tb.Helper()
	mark := time.Now().UTC().Format("20060102T150405.000000000Z")
	p.do(tb, key, http.MethodPost, "/v1/projects/"+prjID+"/restore-points", map[string]any{"label": "before the loss"}, http.StatusCreated, nil)
	var newest string
	e2eEventually(tb, time.Minute, "a metadata snapshot after "+mark, func() (bool, string) {
		var err error
		if newest, err = b.newestSnapshot(tb); err != nil {
			return false, err.Error()
		}
		return newest > mark, "newest: " + newest
	})
	return newest
}

// loseMachine SIGKILLs the appliance and every process of its data directory, and deletes the directory.
func loseMachine(tb testing.TB, p *e2eProc) {
	tb.Helper()
	p.stop(tb, syscall.SIGKILL)
	e2eKillUnder(tb, p.dataDir)
	if err := os.RemoveAll(p.dataDir); err != nil {
		tb.Fatal(err)
	}
}
