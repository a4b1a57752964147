package instances

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/appliance/postgres/pgtest"
	"github.com/theappliance/appliance/store"
)

// basebackupFetch is an Archive.FetchBase taking a fresh base backup of srv (pg_basebackup -X stream, as
// the backup job does) into the data directory, then changing it with tamper (nil: nothing).
func basebackupFetch(t *testing.T, srv *pgtest.Server, tamper func(dataDir string)) func(context.Context, daemon.ExecFunc, string) error {
	return func(ctx context.Context, ex daemon.ExecFunc, dataDir string) error {
		prog, err := srv.Instance.Bin.Path("pg_basebackup")
		if err != nil {
			return err
		}
		cmd := srv.Instance.User.Command(prog, "-D", dataDir, "-F", "p", "-X", "stream", "--checkpoint=fast", "--no-password",
			"-h", "127.0.0.1", "-p", strconv.Itoa(srv.Instance.Port), "-U", postgres.AdminRole)
		cmd.Env = append(cmd.Env, "PGPASSWORD="+pgtest.AdminPassword, "PGSSLMODE=disable")
		if err := daemon.OrDefault(ex)(ctx, cmd); err != nil {
			return err
		}
		if tamper != nil {
			tamper(dataDir)
		}
		return nil
	}
}

// TestVerifyBackup, against a real server: a base backup restored into the scratch instance recovers,
// promotes and is read (its databases listed, one row of each user table, a quoted name included); the
// scratch server archives nothing into the project's archive and its directory is gone afterwards. A backup
// whose pg_control is damaged fails the test with the server's reason, leaves no scratch directory, and the
// live server keeps serving.
func TestVerifyBackup(t *testing.T) {
	t.Parallel()
	srv := pgtest.Start(t, postgres.Settings{})
	ctx := t.Context()
	db, _, conn := srv.Tenant(t)
	if _, err := conn.Exec(ctx, `CREATE TABLE items (n int); INSERT INTO items VALUES (1); CREATE TABLE "Odd ""Name""" (s text)`); err != nil {
		t.Fatal(err)
	}
	m := New(Config{User: srv.Instance.User, Bin: srv.Instance.Bin, ListenHost: "127.0.0.1", Dir: filepath.Dir(srv.Instance.Dir)})
	inst := &store.Instance{ID: srv.Instance.ID, Dir: srv.Instance.Dir, Port: srv.Instance.Port}
	scratchDir := filepath.Join(filepath.Dir(inst.Dir), inst.ID+verifyMarker)

	got, err := m.VerifyBackup(ctx, nil, VerifySpec{Instance: inst, AdminPassword: pgtest.AdminPassword, Label: "good",
		Archive: Archive{RestoreCommand: "false", FetchBase: basebackupFetch(t, srv, nil)}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(got.Databases, db) || !slices.Contains(got.Databases, "postgres") || got.Tables < 2 || got.Timeline < 2 {
		t.Fatalf("restore test found %+v; want the databases postgres and %s, 2 tables or more, a promoted timeline", got, db)
	}
	if _, err := os.Stat(scratchDir); !os.IsNotExist(err) {
		t.Fatalf("the scratch directory is left: %v", err)
	}
	archived, _ := filepath.Glob(filepath.Join(srv.Instance.ArchiveDir(), "00000002*"))
	if len(archived) > 0 {
		t.Fatalf("the scratch server archived into the live instance's archive: %v", archived)
	}

	_, err = m.VerifyBackup(ctx, nil, VerifySpec{Instance: inst, AdminPassword: pgtest.AdminPassword, Label: "damaged",
		Archive: Archive{RestoreCommand: "false", FetchBase: basebackupFetch(t, srv, func(dataDir string) {
			f := filepath.Join(dataDir, "global", "pg_control")
			b, err := os.ReadFile(f)
			if err != nil {
				t.Error(err)
				return
			}
			b[16] ^= 0xff
			if err := os.WriteFile(f, b, 0o600); err != nil {
				t.Error(err)
			}
		})}})
	if err == nil || !strings.Contains(err.Error(), "control file") {
		t.Fatalf("a damaged pg_control: %v; want the server's refusal naming the control file", err)
	}
	t.Logf("damaged backup: %v", err)
	if _, err := os.Stat(scratchDir); !os.IsNotExist(err) {
		t.Fatalf("the scratch directory is left after a failure: %v", err)
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM items").Scan(&n); err != nil || n != 1 {
		t.Fatalf("the live server after the restore tests: %d rows, %v", n, err)
	}
}
