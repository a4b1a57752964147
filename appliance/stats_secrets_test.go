package appliance_test

import (
	"bytes"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/scheduler"
)

func passwordOf(t *testing.T, connURL string) string {
	t.Helper()
	u, err := url.Parse(connURL)
	if err != nil {
		t.Fatal(err)
	}
	pw, _ := u.User.Password()
	if len(pw) < 16 {
		t.Fatalf("no password in %s", redact(connURL))
	}
	return pw
}

// TestRotationLeavesNoPasswordInStatistics: after provisioning and a rotation, neither password is in
// pg_stat_statements as the old credential reads it during the overlap (which also cannot read other
// roles' query texts), nor anywhere in the instance's files as root reads them, also after a clean
// restart wrote the statistics to disk.
func TestRotationLeavesNoPasswordInStatistics(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	prj := provision(t, e, p, "secrets", "development")
	before, err := e.Svc.ProjectConnections(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.Svc.RotateCredentials(t.Context(), p, prj.ID, &appliance.RotateCredentialsRequest{OverlapSeconds: ptr(int64(600))})
	runJob(t, e, res, err)
	after, err := e.Svc.ProjectConnections(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	secrets := []string{passwordOf(t, before.Connections.DirectURL), passwordOf(t, after.Connections.DirectURL)}
	if err := e.AdminExec(t, prj.ID, "SELECT 'appliance-admin-marker'"); err != nil {
		t.Fatal(err)
	}

	check := func(when string) {
		t.Helper()
		old := connect(t, before.Connections.DirectURL)
		rows, err := old.Query(t.Context(), "SELECT query FROM pg_stat_statements")
		if err != nil {
			t.Fatal(err)
		}
		n, hidden := 0, 0
		for rows.Next() {
			var q string
			if err := rows.Scan(&q); err != nil {
				t.Fatal(err)
			}
			n++
			for _, s := range secrets {
				if strings.Contains(q, s) {
					t.Errorf("%s: pg_stat_statements shows a password to the old credential: %q", when, q)
				}
			}
			if strings.Contains(q, "appliance-admin-marker") {
				t.Errorf("%s: the project role reads the appliance's statement %q", when, q)
			}
			if q == "<insufficient privilege>" {
				hidden++
			}
		}
		if rows.Err() != nil || n == 0 || hidden == 0 {
			t.Errorf("%s: %d statements, %d hidden (%v): the test reads nothing", when, n, hidden, rows.Err())
		}
		if scalar[bool](t, old, "SELECT pg_has_role(current_user, 'pg_read_all_stats', 'MEMBER')") {
			t.Errorf("%s: the project role reads all statistics (pg_read_all_stats)", when)
		}
	}
	check("during the overlap")

	// A clean restart writes the statistics to disk and reads them back.
	up, err := e.Svc.Upgrades().Minor(t.Context(), p, prj.ID, true)
	if j := runJob(t, e, up, err); j.State != scheduler.StateCompleted {
		t.Fatalf("restart: %s %s", j.State, j.Error)
	}
	check("after a restart")
	eachFile(instanceOf(t, e, prj).Dir, func(path string, b []byte) {
		for _, s := range secrets {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s holds a password", path)
			}
		}
	})
}

// eachFile calls fn with the path and contents of every regular file under dir that root can read.
func eachFile(dir string, fn func(path string, b []byte)) {
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if b, err := os.ReadFile(path); err == nil {
			fn(path, b)
		}
		return nil
	})
}

// TestAdoptionPurgesOldSecrets: an instance an older appliance left with a password in pg_stat_statements
// and pg_monitor granted to the project role is cleaned when the appliance adopts it at start, and its
// admin role's verifier (PostgreSQL's 4096 iterations then) gets postgres.AdminSCRAMIterations.
func TestAdoptionPurgesOldSecrets(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	prj := provision(t, e, p, "legacy", "development")
	conns, err := e.Svc.ProjectConnections(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	adminIterations := func() int {
		t.Helper()
		var v string
		if err := e.Svc.AdminQueryRow(t.Context(), prj.ID, "SELECT rolpassword FROM pg_catalog.pg_authid WHERE rolname = $1", []any{postgres.AdminRole}, &v); err != nil {
			t.Fatal(err)
		}
		n, ok := postgres.SCRAMIterationsOf(v)
		if !ok {
			t.Fatalf("the admin role's password is no SCRAM verifier: %.20q", v)
		}
		return n
	}
	if n := adminIterations(); n != postgres.AdminSCRAMIterations {
		t.Errorf("a new instance's admin verifier has %d iterations", n)
	}
	// What the older appliance did: a tracked ALTER ROLE with the password in clear, pg_monitor, and
	// initdb's verifier of the admin password.
	oldVerifier, err := postgres.SCRAMVerifier(e.AdminConfig(t, prj.ID).Password)
	if err != nil {
		t.Fatal(err)
	}
	const leaked = "legacy-plaintext-password-123"
	for _, q := range []string{"ALTER ROLE " + prj.RoleName + "_alt PASSWORD '" + leaked + "'", "GRANT pg_monitor TO " + prj.RoleName,
		"ALTER ROLE " + postgres.AdminRole + " PASSWORD '" + oldVerifier + "'"} {
		if err := e.AdminExec(t, prj.ID, q); err != nil {
			t.Fatal(err)
		}
	}
	c := connect(t, conns.Connections.DirectURL)
	if n := scalar[int64](t, c, "SELECT count(*) FROM pg_stat_statements WHERE query LIKE '%"+leaked+"%'"); n == 0 {
		t.Fatal("the fixture did not leak the password into pg_stat_statements")
	}
	if n := adminIterations(); n != 4096 {
		t.Fatalf("the fixture's admin verifier has %d iterations", n)
	}
	if err := e.Svc.AdoptInstances(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := adminIterations(); n != postgres.AdminSCRAMIterations {
		t.Errorf("after adoption the admin verifier has %d iterations", n)
	}
	c = connect(t, conns.Connections.DirectURL)
	if n := scalar[int64](t, c, "SELECT count(*) FROM pg_stat_statements WHERE query LIKE '%"+leaked+"%'"); n != 0 {
		t.Error("the password is still in pg_stat_statements after adoption")
	}
	if scalar[bool](t, c, "SELECT pg_has_role(current_user, 'pg_monitor', 'MEMBER')") {
		t.Error("the project role is still a member of pg_monitor after adoption")
	}
}
