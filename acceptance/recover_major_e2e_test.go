package acceptance

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/testtools"
)

// TestRecoverAnUpgradedProject: a project upgraded to 17 by pg_upgrade (Debian 13's 17 given as --pg-dist
// 17=<its bin directory>) and confirmed, backed up on 17, is rebuilt by `recover` on a new machine on an
// installation of 17 found there. Without one, recover fails for the project and names the major to
// install (the record's path is the lost machine's); run again with --pg-dist 17=<bin directory>, it
// finishes: every row, on 17.
func TestRecoverAnUpgradedProject(t *testing.T) {
	t.Parallel()
	pg17, err := testtools.DebianPostgres(t.Context(), 17)
	if err != nil {
		t.Fatal(err)
	}
	bk := e2eBucket(t)
	bk.env = append(bk.env, e2eNoSpares) // no spare clusters in any up of the test
	bin := e2eBuild(t)
	dataDir := appliancetest.TraversableTempDir(t)
	t.Cleanup(func() { e2eKillUnder(t, dataDir) })
	upFlags := append(bk.flags(), "--pg-dist", "17="+pg17)
	p := e2eStartWith(t, bin, dataDir, bk.env, upFlags)
	m := regexp.MustCompile(`(?m)^  recovery_key: ([0-9a-f]{64})$`).FindStringSubmatch(p.stdout.String())
	if m == nil {
		t.Fatalf("the first start with a bucket shows no recovery key:\n%s", p.stdout)
	}
	keyFile := filepath.Join(t.TempDir(), "recovery.key")
	if err := os.WriteFile(keyFile, []byte(m[1]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	key := e2eAdminKey(t, dataDir)
	id := p.e2eProvision(t, key, "upgraded then lost")
	conns := p.connections(t, key, id)
	e2eSQL(t, conns.DirectURL, false, "CREATE TABLE kept (id int PRIMARY KEY, note text NOT NULL)",
		"INSERT INTO kept SELECT g, 'on 15 ' || g FROM generate_series(1, 100) g")
	for _, step := range []string{"/upgrade/major?target_major=17", "/upgrade/major/confirm"} {
		j := p.call(t, key, http.MethodPost, "/v1/projects/"+id+step, nil, http.StatusAccepted)
		if j := waitJobFor(t, p, key, j.ID, restoreDeadline); j.State != "completed" {
			t.Fatalf("%s: %s %q\n%s", step, j.State, j.Error, j.LastStderr)
		}
	}
	e2eSQL(t, conns.PooledURL, true, "INSERT INTO kept SELECT g, 'on 17 ' || g FROM generate_series(101, 150) g")
	want := recoverChecksum(t, conns.PooledURL)
	bj := p.call(t, key, http.MethodPost, "/v1/projects/"+id+"/backups", map[string]any{"label": "on 17"}, http.StatusAccepted)
	if j := waitJobFor(t, p, key, bj.ID, restoreDeadline); j.State != "completed" {
		t.Fatalf("backup %s: %q\n%s", j.State, j.Error, j.LastStderr)
	}
	bk.snapshotEverything(t, p, key, id)
	loseMachine(t, p)

	newDir := appliancetest.TraversableTempDir(t)
	t.Cleanup(func() { e2eKillUnder(t, newDir) })
	// No 17 on the new machine: the project fails, naming what to install.
	out, err := bk.recover(t, 10*time.Minute, bin, newDir, keyFile)
	if err == nil {
		t.Fatalf("recover without PostgreSQL 17 succeeded:\n%s", out)
	}
	for _, w := range []string{"PostgreSQL 17", "install postgresql-17", "--pg-dist 17="} {
		if !strings.Contains(out, w) {
			t.Fatalf("recover without PostgreSQL 17 does not say %q:\n%s", w, out)
		}
	}
	// With it: the same command finishes the recovery on it.
	out, err = bk.recover(t, 10*time.Minute, bin, newDir, keyFile, "--pg-dist", "17="+pg17)
	if err != nil {
		t.Fatalf("recover with --pg-dist 17: %v\n%s", err, out)
	}
	q := e2eStartWith(t, bin, newDir, bk.env, upFlags)
	checkRecovered(t, q, key, id, want, out, "17")
	q.stop(t, syscall.SIGTERM)
}
