package instances

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/store"
)

// VerifySpec is a restore test of one base backup of a project: the backup fetched from the backup store
// (Archive.FetchBase, the restores' path) into a scratch directory beside the project's instance, started
// as a throwaway server that recovers to the backup's consistent point and is queried, then removed.
type VerifySpec struct {
	Instance *store.Instance // the project's instance: its binaries and TLS files; the scratch goes beside it
	// AdminPassword is the admin role's password in the backup (the instance's: it is set at creation).
	AdminPassword string
	Archive       Archive // the project's WAL archive (restore_command) and the base backup to test
	Label         string  // names the test in the recovery settings (the backup's key)
}

// Verified is what a restore test found in the recovered backup.
type Verified struct {
	Databases []string // the databases that accept connections (template databases left out)
	Tables    int      // user tables in them, each of which gave one row (or none: empty)
	Timeline  int      // the scratch server's timeline once promoted
}

// verifyMarker is the suffix of an instance's scratch directory for restore tests: <instances>/<id>.verify.
const verifyMarker = ".verify"

// scratch is the throwaway instance of the instance's restore test (one at a time: a fixed directory).
func (m *Manager) scratch(inst *store.Instance) *postgres.Instance {
	return &postgres.Instance{ID: inst.ID + "-verify", Dir: filepath.Join(filepath.Dir(inst.Dir), inst.ID+verifyMarker),
		Bin: m.Instance(inst).Bin, User: m.cfg.User}
}

// RemoveVerifyScratch stops and deletes what a restore test of the instance left (a crash in the middle of
// one): nothing when there is no scratch directory.
func (m *Manager) RemoveVerifyScratch(ctx context.Context, inst *store.Instance) {
	m.removeCandidate(ctx, m.scratch(inst))
}

// VerifyBackup restores a base backup into a scratch instance and queries it: the base backup is fetched
// through the backup store (as a restore does), the server starts on a free loopback port as the instances'
// OS user, with no pooler and an archive_command that discards its WAL (a scratch server must never write
// into the project's archive), recovers to the backup's consistent point (recovery_target = 'immediate')
// and promotes; then every database that accepts connections is listed and each user table gives one row.
// The scratch server is stopped and its directory removed whatever happens. The project's own instance is
// only read (its TLS files).
func (m *Manager) VerifyBackup(ctx context.Context, exec daemon.ExecFunc, spec VerifySpec) (Verified, error) {
	live := m.Instance(spec.Instance)
	cand := m.scratch(spec.Instance)
	m.removeCandidate(ctx, cand) // a leftover of a crashed test
	defer m.removeCandidate(context.WithoutCancel(ctx), cand)

	var out Verified
	var err error
	if cand.Port, err = postgres.FreePort(); err != nil {
		return out, err
	}
	if err := m.prepareCandidate(ctx, exec, live, cand, spec.Archive.FetchBase); err != nil {
		return out, err
	}
	// A backup taken before a major upgrade does not start on the instance's binaries: say so plainly.
	if v, err := os.ReadFile(filepath.Join(cand.DataDir(), "PG_VERSION")); err != nil {
		return out, fmt.Errorf("the base backup has no PG_VERSION: %w", err)
	} else if major := strings.TrimSpace(string(v)); cand.Bin.Major != 0 && major != strconv.Itoa(cand.Bin.Major) {
		return out, fmt.Errorf("the base backup is of PostgreSQL %s, the instance runs %d: it cannot be restored into it", major, cand.Bin.Major)
	}
	settings, err := cand.ReadSettings()
	if err != nil {
		return out, fmt.Errorf("the base backup's settings: %w", err)
	}
	settings.ArchiveCommand, settings.ArchiveTimeout = postgres.DiscardArchiveCommand, 0
	if _, err := cand.WriteSettings(settings); err != nil {
		return out, err
	}
	autoConf := filepath.Join(cand.DataDir(), "postgresql.auto.conf")
	original, err := os.ReadFile(autoConf)
	if err != nil && !os.IsNotExist(err) {
		return out, err
	}
	conf := recoveryConf("restore test "+spec.Label, spec.Archive.RestoreCommand, Target{})
	if err := m.writeUserFile(autoConf, append(append([]byte{}, original...), conf...)); err != nil {
		return out, err
	}
	if err := m.writeUserFile(filepath.Join(cand.DataDir(), "recovery.signal"), nil); err != nil {
		return out, err
	}
	since := time.Now()
	if err := startScratch(ctx, exec, cand); err != nil {
		return out, fmt.Errorf("start the restored backup: %w", err)
	}
	if err := waitPromoted(ctx, cand, spec.AdminPassword, since); err != nil {
		return out, err
	}
	if out, err = queryScratch(ctx, cand, spec.AdminPassword); err != nil {
		return out, err
	}
	if err := cand.Stop(ctx, exec, daemon.StopFast); err != nil {
		return out, fmt.Errorf("stop the restored backup: %w", err)
	}
	return out, nil
}

// queryScratch reads the recovered server: its timeline, the databases that accept connections, and one
// row of every user table of each (a table whose files are missing or unreadable fails the test).
func queryScratch(ctx context.Context, cand *postgres.Instance, password string) (Verified, error) {
	var out Verified
	conn, err := cand.Admin(ctx, password)
	if err != nil {
		return out, fmt.Errorf("connect to the restored backup: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if out.Timeline, _, err = CurrentTimeline(ctx, conn); err != nil {
		return out, fmt.Errorf("query the restored backup: %w", err)
	}
	rows, err := conn.Query(ctx, "SELECT datname FROM pg_database WHERE datallowconn AND NOT datistemplate ORDER BY datname")
	if err != nil {
		return out, fmt.Errorf("list the restored backup's databases: %w", err)
	}
	if out.Databases, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return out, fmt.Errorf("list the restored backup's databases: %w", err)
	}
	for _, db := range out.Databases {
		n, err := readTables(ctx, cand, password, db)
		if err != nil {
			return out, fmt.Errorf("database %s of the restored backup: %w", db, err)
		}
		out.Tables += n
	}
	return out, nil
}

// readTables reads one row of every user table (ordinary and partitioned, outside the system schemas) of
// a database, and returns how many it read.
func readTables(ctx context.Context, cand *postgres.Instance, password, database string) (int, error) {
	conn, err := cand.Connect(ctx, password, database)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_toast%'
		ORDER BY 1, 2`)
	if err != nil {
		return 0, err
	}
	type table struct{ schema, name string }
	tables, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (table, error) {
		var t table
		return t, r.Scan(&t.schema, &t.name)
	})
	if err != nil {
		return 0, err
	}
	for _, t := range tables {
		q := "SELECT 1 FROM " + pgx.Identifier{t.schema, t.name}.Sanitize() + " LIMIT 1"
		if _, err := conn.Exec(ctx, q); err != nil {
			return 0, fmt.Errorf("read %s: %w", strings.Join([]string{t.schema, t.name}, "."), err)
		}
	}
	return len(tables), nil
}
