package instances

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/appliance/postgres/pgtest"
	"github.com/theappliance/appliance/appliance/testtools"
	"github.com/theappliance/appliance/store"
)

func TestMain(m *testing.M) { testtools.Main(m) }

// TestRecoveryConf: the recovery settings name the archive, stop at the target (a restore point's name, a
// time, the end of the backup, or none: the end of the archive) on the timeline asked for (the current one
// by default, the latest for the end of the archive), then promote.
func TestRecoveryConf(t *testing.T) {
	at := time.Date(2026, 1, 31, 12, 0, 0, 250_000_000, time.UTC)
	for _, c := range []struct {
		name   string
		target Target
		want   []string
	}{
		{"immediate", Target{}, []string{"recovery_target = 'immediate'", "recovery_target_timeline = 'current'"}},
		{"name", Target{Name: "before 'x'", Timeline: 3}, []string{"recovery_target_name = 'before ''x'''", "recovery_target_timeline = '3'"}},
		{"time", Target{Time: at}, []string{"recovery_target_time = '2026-01-31 12:00:00.25+00'", "recovery_target_timeline = 'current'"}},
		{"end of the archive", Target{End: true}, []string{"recovery_target_timeline = 'latest'"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			conf := string(recoveryConf("job_1", `cp "/backups/prj/wal/%f" "%p"`, c.target))
			want := append([]string{"# appliance: restore job_1", `restore_command = 'cp "/backups/prj/wal/%f" "%p"'`}, c.want...)
			want = append(want, "recovery_target_action = 'promote'")
			for _, w := range want {
				if !strings.Contains(conf, w+"\n") {
					t.Errorf("recovery settings lack %q:\n%s", w, conf)
				}
			}
			for _, target := range []string{"recovery_target =", "recovery_target_name =", "recovery_target_time ="} {
				if c.target.End && strings.Contains(conf, target) {
					t.Errorf("recovery settings to the end of the archive name a target (%s):\n%s", target, conf)
				}
			}
		})
	}
}

// TestSpareAdoptionAndLogins, against a real server: a spare's placeholders become the project's role,
// second login and database in one step (once: a second adoption finds none); setting the logins again is
// idempotent; the credential logs in, the second login acts as the project's role, the storage lock's
// NOLOGIN refuses the login; and no statement that carried a password is left in pg_stat_statements.
func TestSpareAdoptionAndLogins(t *testing.T) {
	t.Parallel()
	srv := pgtest.Start(t, postgres.Settings{})
	ctx := context.Background()
	admin := srv.Admin(t, "postgres")
	if err := ensureRolesAndDatabase(ctx, admin, &store.Project{RoleName: spareRole, DatabaseName: spareDatabase},
		Credential{Username: spareRole, Password: "placeholder-secret"}); err != nil {
		t.Fatal(err)
	}
	prj := &store.Project{RoleName: "shop_owner", DatabaseName: "shop"}
	cred := Credential{Username: prj.RoleName, Password: "first-secret"}
	if adopted, err := adoptSpare(ctx, admin, prj, cred); err != nil || !adopted {
		t.Fatalf("adopt the spare: adopted %v, %v", adopted, err)
	}
	if adopted, err := adoptSpare(ctx, admin, prj, cred); err != nil || adopted {
		t.Fatalf("a second adoption: adopted %v, %v; want no placeholders left", adopted, err)
	}
	if err := ensureRolesAndDatabase(ctx, admin, prj, cred); err != nil {
		t.Fatalf("set the roles and database again: %v", err)
	}
	login := func(user, password string) (*pgx.Conn, error) {
		cfg, err := pgx.ParseConfig(fmt.Sprintf("host=127.0.0.1 port=%d dbname=%s user=%s password=%s sslmode=verify-full sslrootcert=%s connect_timeout=10",
			srv.Instance.Port, prj.DatabaseName, user, password, srv.CA.CertPath()))
		if err != nil {
			t.Fatal(err)
		}
		return pgx.ConnectConfig(ctx, cfg)
	}
	conn, err := login(prj.RoleName, "first-secret")
	if err != nil {
		t.Fatalf("the credential does not log in: %v", err)
	}
	var owner string
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.pg_get_userbyid(datdba) FROM pg_catalog.pg_database WHERE datname = current_database()").Scan(&owner); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	if owner != prj.RoleName {
		t.Errorf("database owner %q, want %q", owner, prj.RoleName)
	}

	alt := Credential{Username: AltRole(prj.RoleName), Password: "second-secret"}
	if err := setLogins(ctx, admin, prj, alt); err != nil {
		t.Fatal(err)
	}
	conn, err = login(alt.Username, alt.Password)
	if err != nil {
		t.Fatalf("the second login does not log in: %v", err)
	}
	var role string
	if err := conn.QueryRow(ctx, "SELECT current_user").Scan(&role); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	if role != prj.RoleName {
		t.Errorf("the second login acts as %q, want %q", role, prj.RoleName)
	}

	locked := Credential{Username: prj.RoleName, Password: "third-secret", NoLogin: true}
	if err := setLogins(ctx, admin, prj, locked); err != nil {
		t.Fatal(err)
	}
	var pgErr *pgconn.PgError
	if conn, err := login(prj.RoleName, "third-secret"); err == nil {
		conn.Close(ctx)
		t.Error("a NOLOGIN credential logged in")
	} else if !errors.As(err, &pgErr) || pgErr.Code != "28000" {
		t.Errorf("a NOLOGIN credential: %v; want SQLSTATE 28000", err)
	}

	db := srv.Admin(t, prj.DatabaseName)
	var leaked int
	if err := db.QueryRow(ctx, "SELECT count(*) FROM public.pg_stat_statements WHERE query ~* 'password|passwd'").Scan(&leaked); err != nil {
		t.Fatal(err)
	}
	if leaked != 0 {
		t.Errorf("pg_stat_statements holds %d statements with a password", leaked)
	}
}
