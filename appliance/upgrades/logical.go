package upgrades

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/instances"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// Upgrade methods (store.Instance.UpgradeMethod).
const (
	MethodPgUpgrade = api.UpgradeMethodPgUpgrade
	MethodLogical   = api.UpgradeMethodLogical
)

// The names the logical upgrade gives its publications, subscriptions and slots: forward (old → new) until
// the cutover, rollback (new → old) from the cutover until confirm or rollback. A subscription and its slot
// share a name, suffixed with the database's OID on the publishing server (slots are per cluster).
const (
	forwardName  = "appliance_upgrade"
	rollbackName = "appliance_rollback"
)

// Waits of the logical upgrade (variables: tests may shorten them).
var (
	// catchUpWait bounds the initial copy and the catch-up before the cutover.
	catchUpWait = 30 * time.Minute
	// drainWait bounds the wait for zero lag once writes are paused: past it the cutover gives up and the
	// project resumes on the old server.
	drainWait = 60 * time.Second
	pollEvery = 100 * time.Millisecond
)

// logicalPlan is what a logical upgrade found: the databases it follows and what stops it.
type logicalPlan struct {
	Databases []string `json:"databases"`
	Tables    int      `json:"tables"`
	Blockers  []string `json:"blockers"`
	Warnings  []string `json:"warnings"`
}

// checkLogical inspects the project's server for what logical replication cannot carry or the target
// installation lacks.
func (s *Service) checkLogical(ctx context.Context, prj *store.Project, inst *store.Instance, target postgres.Binaries) (*logicalPlan, error) {
	plan := &logicalPlan{Blockers: []string{}, Warnings: []string{}}
	conn, err := s.host.AdminConn(ctx, inst, "postgres")
	if err != nil {
		return nil, scheduler.Transient(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if plan.Databases, err = databases(ctx, conn); err != nil {
		return nil, err
	}
	// The libraries the new cluster would preload (the settings' defaults for its installation, and the
	// project's own).
	libs := postgres.DefaultPreloadLibraries(target)
	for _, l := range prj.PreloadLibraries {
		if !slices.Contains(libs, l) {
			libs = append(libs, l)
		}
	}
	for _, lib := range libs {
		if !target.HasLibrary(lib) {
			plan.Blockers = append(plan.Blockers, fmt.Sprintf("the preloaded library %s is not in PostgreSQL %d's installation", lib, target.Major))
		}
	}
	var level string
	if err := conn.QueryRow(ctx, "SHOW wal_level").Scan(&level); err != nil {
		return nil, err
	}
	if level != "logical" {
		plan.Warnings = append(plan.Warnings, "wal_level is "+level+": the upgrade restarts the server once to turn logical decoding on (open sessions end)")
	}
	for _, db := range plan.Databases {
		if err := s.checkDatabase(ctx, inst, db, target, plan); err != nil {
			return nil, err
		}
	}
	if tools := target.Tools(); !slices.Contains(tools, "pg_dump") {
		plan.Warnings = append(plan.Warnings, fmt.Sprintf("PostgreSQL %d's installation has no client tools: after the upgrade the project's base backups are online copies (checked by PostgreSQL %d's pg_verifybackup without reading their WAL), and its exports and imports (pg_dump, pg_restore) are refused, naming the missing program, until they are installed for %d (postgresql-client-%d); a rollback, or a restore to a time before the upgrade, returns to %d with them",
			target.Major, inst.Major, target.Major, target.Major, inst.Major))
	}
	plan.Warnings = append(plan.Warnings,
		"schema changes (DDL) between the start of the upgrade and its cutover are not replicated: make none",
		"rollback returns to the old major with the rows written after the cutover (reverse replication until confirm); it does not carry schema changes, new databases or large objects made after the cutover")
	return plan, nil
}

// checkDatabase adds the blockers of one database: large objects, unlogged tables, tables without a
// replica identity (their UPDATE and DELETE could not be replicated), extensions the target lacks.
func (s *Service) checkDatabase(ctx context.Context, inst *store.Instance, db string, target postgres.Binaries, plan *logicalPlan) error {
	conn, err := s.host.AdminConn(ctx, inst, db)
	if err != nil {
		return scheduler.Transient(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var lobs bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_largeobject_metadata)").Scan(&lobs); err != nil {
		return err
	}
	if lobs {
		plan.Blockers = append(plan.Blockers, fmt.Sprintf("database %s has large objects, which logical replication does not carry: export and remove them (lo_unlink), or store them in bytea columns", db))
	}
	const userTables = `FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname !~ '^pg_toast'`
	unlogged, err := queryStrings(ctx, conn, `SELECT format('%I.%I', n.nspname, c.relname) `+userTables+` AND c.relpersistence = 'u' ORDER BY 1`)
	if err != nil {
		return err
	}
	for _, t := range unlogged {
		plan.Blockers = append(plan.Blockers, fmt.Sprintf("%s: table %s is unlogged, which logical replication does not carry: ALTER TABLE %s SET LOGGED", db, t, t))
	}
	noIdentity, err := queryStrings(ctx, conn, `SELECT format('%I.%I', n.nspname, c.relname) `+userTables+` AND c.relkind = 'r'
		AND c.relpersistence = 'p' AND (c.relreplident = 'n' OR c.relreplident = 'd' AND NOT EXISTS (
			SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary)) ORDER BY 1`)
	if err != nil {
		return err
	}
	for _, t := range noIdentity {
		plan.Blockers = append(plan.Blockers, fmt.Sprintf("%s: table %s has no primary key, so its UPDATEs and DELETEs cannot be replicated: add one, or ALTER TABLE %s REPLICA IDENTITY FULL", db, t, t))
	}
	var tables int
	if err := conn.QueryRow(ctx, `SELECT count(*) `+userTables+` AND c.relkind = 'r'`).Scan(&tables); err != nil {
		return err
	}
	plan.Tables += tables
	exts, err := queryStrings(ctx, conn, "SELECT extname::text FROM pg_extension ORDER BY 1")
	if err != nil {
		return err
	}
	for _, e := range exts {
		if !target.HasExtension(e) {
			plan.Blockers = append(plan.Blockers, fmt.Sprintf("%s: extension %s is not available in PostgreSQL %d's installation: drop it first, or install it there", db, e, target.Major))
		}
	}
	return nil
}

func queryStrings(ctx context.Context, conn *pgx.Conn, sql string, args ...any) ([]string, error) {
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// databases lists the server's databases that take connections (the templates excluded).
// databasesOf lists the databases of inst's server (as databases), on an admin connection of its own; a
// server that does not answer is a transient error.
func (s *Service) databasesOf(ctx context.Context, inst *store.Instance) ([]string, error) {
	conn, err := s.host.AdminConn(ctx, inst, "postgres")
	if err != nil {
		return nil, scheduler.Transient(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return databases(ctx, conn)
}

func databases(ctx context.Context, conn *pgx.Conn) ([]string, error) {
	return queryStrings(ctx, conn, "SELECT datname::text FROM pg_database WHERE datallowconn AND NOT datistemplate ORDER BY datname = 'postgres' DESC, datname")
}

func blockersErr(plan *logicalPlan) error {
	if len(plan.Blockers) == 0 {
		return nil
	}
	return fmt.Errorf("the upgrade by logical replication cannot run: %s", strings.Join(plan.Blockers, "; "))
}

// at is a copy of the record on another port (the old server of a logical upgrade, the new one before its
// cutover).
func at(rec *store.Instance, port int) *store.Instance {
	c := *rec
	c.Port = port
	return &c
}

// conninfo is the libpq connection string from one instance to another's database, as the admin role.
func (s *Service) conninfo(rec *store.Instance, port int, db string) (string, error) {
	pw, err := s.box.Open(rec.AdminPassword)
	if err != nil {
		return "", err
	}
	q := func(v string) string {
		return "'" + strings.ReplaceAll(strings.ReplaceAll(v, `\`, `\\`), "'", `\'`) + "'"
	}
	return fmt.Sprintf("host=127.0.0.1 port=%d dbname=%s user=%s password=%s sslmode=prefer", port, q(db), q(postgres.AdminRole), q(string(pw))), nil
}

// progress records where the job is (best effort: a failed write is no reason to stop an upgrade).
func progress(run *scheduler.Run, step string, extra map[string]any) {
	p := map[string]any{"step": step, "method": MethodLogical}
	for k, v := range extra {
		p[k] = v
	}
	_ = run.Progress(p)
}

// logicalMajor upgrades by logical replication: a new instance of the target major on a port of its own,
// the roles and schema copied with the source's tools, a subscription per database that copies and then
// follows the old server, and, once caught up, the cutover (cutover). Until the cutover the project serves
// from its old server; a failure before it leaves the project as it was.
func (s *Service) logicalMajor(ctx context.Context, run *scheduler.Run, dp *Plane, prj *store.Project, inst *store.Instance, target postgres.Binaries) (any, error) {
	started := time.Now()
	newDir := filepath.Join(filepath.Dir(inst.Dir), inst.ID+"-pg"+strconv.Itoa(target.Major))
	if newDir == inst.Dir || newDir == inst.PreviousDir {
		// The project's cluster has that name already (upgraded to this major before, then restored to a
		// time before that upgrade: the restore keeps the directory): the new one takes the job's.
		newDir += "-" + run.Job.ID
	}
	// The new cluster archives its WAL into an archive of its own from its creation (its segment names start
	// over on timeline 1): a name fixed by the job, so a retry's is the same.
	walArchive := fmt.Sprintf("pg%d-%s", target.Major, run.Job.ID)
	// What an earlier attempt of this job left when the appliance stopped in its middle: its new cluster
	// (a server still running on its port), its slots, its archive and backup, the old server fenced.
	progress(run, "preflight", nil)
	if err := s.clearAttempt(ctx, prj, inst, newDir, walArchive); err != nil {
		return nil, scheduler.Transient(fmt.Errorf("clear what an earlier attempt left: %w", err))
	}
	plan, err := s.checkLogical(ctx, prj, inst, target)
	if err != nil {
		return nil, err
	}
	if err := blockersErr(plan); err != nil {
		return nil, err
	}
	if err := s.ensureLogicalDecoding(ctx, run, prj, inst); err != nil {
		return nil, err
	}
	next, nextRec, err := s.prepareTarget(ctx, run, dp, prj, inst, target, newDir, walArchive, plan.Databases)
	if err != nil {
		if ctx.Err() == nil {
			s.host.ForgetCluster(context.WithoutCancel(ctx), prj, walArchive)
		}
		return nil, err
	}
	abandon := func(cause error) error {
		if ctx.Err() != nil { // the appliance stops: the retry after its next start clears the attempt
			return cause
		}
		bg := context.WithoutCancel(ctx)
		err := errors.Join(next.Remove(bg), s.dropForward(bg, inst, plan.Databases), s.host.ForgetCluster(bg, prj, walArchive))
		if err != nil {
			return fmt.Errorf("%w (and removing the attempt: %v)", cause, err)
		}
		return cause
	}
	progress(run, "subscribe", nil)
	for _, db := range plan.Databases {
		slot, err := s.publish(ctx, inst, db, forwardName, false)
		if err != nil {
			return nil, abandon(fmt.Errorf("follow %s: %w", db, err))
		}
		if err := s.subscribe(ctx, inst, nextRec, db, slot, forwardName, true); err != nil {
			return nil, abandon(fmt.Errorf("follow %s: %w", db, err))
		}
	}
	s.step(ctx, run, "upgrade-catching-up")
	caught, err := s.waitSynchronized(ctx, run, inst, nextRec, plan.Databases, forwardName)
	if err != nil {
		return nil, abandon(err)
	}
	// A base backup of the new cluster before the cutover: with the WAL it archives from its creation, every
	// time after the cutover is restorable (the old cluster's backups and archive cover the times before).
	progress(run, "base backup of the new cluster", nil)
	if err := s.host.BackupCluster(ctx, run, prj, nextRec, fmt.Sprintf("PostgreSQL %d before the cutover of %s", target.Major, run.Job.ID)); err != nil {
		return nil, abandon(fmt.Errorf("the new cluster's base backup: %w", err))
	}
	copied := time.Since(started)
	res, err := s.cutover(ctx, run, prj, inst, nextRec, plan.Databases)
	if errors.Is(err, errSwapped) { // the project is on the new server: nothing to abandon
		return nil, err
	}
	if err != nil {
		return nil, abandon(err)
	}
	res["from_major"], res["to_major"], res["method"] = inst.Major, target.Major, MethodLogical
	res["databases"], res["tables"], res["warnings"] = plan.Databases, plan.Tables, plan.Warnings
	res["copy_ms"], res["total_ms"] = copied.Milliseconds(), time.Since(started).Milliseconds()
	res["tables_synchronized"], res["lag_bytes_before_cutover"] = caught.Synchronized, caught.LagBytes
	return res, nil
}

// clearAttempt removes what an earlier attempt of the upgrade left before its cutover (the appliance
// stopped, or was killed, in its middle): the new cluster in newDir (its server stopped), the forward
// publications and slots on the old server, the new cluster's archive walArchive and its backup; and lifts
// the old server's fence (an attempt killed inside the write pause), the supervisor running it again. A
// first attempt finds nothing to do.
func (s *Service) clearAttempt(ctx context.Context, prj *store.Project, inst *store.Instance, newDir, walArchive string) error {
	rec := *inst
	rec.Dir = newDir
	if err := s.eng.Instance(&rec).Remove(ctx); err != nil {
		return err
	}
	if old := s.eng.Instance(inst); old.Fenced() {
		// Killed in the pause: the pooler is stopped, the server fenced (or stopped, a new server on its
		// port, removed above). Its logins are let in, and the supervisor runs both again.
		if err := old.Fence(false); err != nil {
			return err
		}
		if err := s.eng.Watch(inst, prj); err != nil {
			return err
		}
		s.host.SetRuntime(prj.ID, api.RuntimeActive)
	}
	var conn *pgx.Conn
	err := waitUntil(ctx, time.Minute, func() (err error) {
		conn, err = s.host.AdminConn(ctx, inst, "postgres")
		return err
	})
	if err != nil {
		return fmt.Errorf("the old server: %w", err)
	}
	err = postgres.ReloadConf(ctx, conn) // a fence lifted above is in force
	var dbs []string
	if err == nil {
		dbs, err = databases(ctx, conn)
	}
	conn.Close(context.WithoutCancel(ctx))
	if err != nil {
		return err
	}
	return errors.Join(s.dropForward(ctx, inst, dbs), s.host.ForgetCluster(ctx, prj, walArchive))
}

// waitUntil calls try until it succeeds or within has passed (then its last error).
func waitUntil(ctx context.Context, within time.Duration, try func() error) error {
	deadline := time.Now().Add(within)
	for {
		err := try()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// step calls the job-step hook (Deps.Step: test builds stop the process there).
func (s *Service) step(ctx context.Context, run *scheduler.Run, name string) {
	if s.stepHook != nil {
		s.stepHook(ctx, run.Job.ID, name)
	}
}

// prepareTarget makes a new cluster of the target major in dir (on a free port, fenced: the appliance's
// alone) with the old server's roles and the schema of its databases. Its WAL goes to the project's archive
// walArchive from its start ("": discarded, a preflight's scratch cluster). It removes the cluster again
// when a step fails.
func (s *Service) prepareTarget(ctx context.Context, run *scheduler.Run, dp *Plane, prj *store.Project, inst *store.Instance,
	target postgres.Binaries, dir, walArchive string, dbs []string) (*postgres.Instance, *store.Instance, error) {
	port, err := postgres.FreePort()
	if err != nil {
		return nil, nil, err
	}
	progress(run, "init", map[string]any{"dir": dir})
	next, err := s.newCluster(ctx, run, prj, inst, target, dir)
	if err != nil {
		return nil, nil, err
	}
	next.Port = port
	rec := at(inst, port)
	rec.Dir, rec.Major, rec.BinDir, rec.WALArchive, rec.WALArchiveOff = dir, target.Major, target.Dir, walArchive, false
	fail := func(cause error) (*postgres.Instance, *store.Instance, error) {
		next.Remove(context.WithoutCancel(ctx))
		return nil, nil, cause
	}
	// From its creation on it archives into an archive of its own (its segment names start over on
	// timeline 1): a base backup taken before the cutover and that WAL restore any time after the cutover.
	// See docs/api-decisions.md.
	if walArchive != "" {
		if err := s.archiveInto(prj, rec, walArchive); err != nil {
			return fail(fmt.Errorf("the new cluster's WAL archive: %w", err))
		}
	} else {
		set, err := next.ReadSettings()
		if err != nil {
			return fail(err)
		}
		set.ArchiveCommand, set.ArchiveTimeout = postgres.DiscardArchiveCommand, 0
		if _, err := next.WriteSettings(set); err != nil {
			return fail(err)
		}
	}
	// Until the cutover the new server is the appliance's alone.
	if err := next.Fence(true); err != nil {
		return fail(err)
	}
	if err := next.Start(ctx, run.Exec); err != nil {
		return fail(err)
	}
	progress(run, "schema", map[string]any{"databases": dbs})
	old := s.eng.Instance(inst)
	if err := s.copyRoles(ctx, run, dp, old, inst, rec); err != nil {
		return fail(fmt.Errorf("copy the roles: %w", err))
	}
	for _, db := range dbs {
		if err := s.copySchema(ctx, run, dp, old, inst, dir, port, db); err != nil {
			return fail(fmt.Errorf("copy the schema of %s: %w", db, err))
		}
	}
	return next, rec, nil
}

// ensureLogicalDecoding restarts the server when it runs with wal_level below logical (an instance started
// before the appliance's configuration asked for it).
func (s *Service) ensureLogicalDecoding(ctx context.Context, run *scheduler.Run, prj *store.Project, inst *store.Instance) error {
	conn, err := s.host.AdminConn(ctx, inst, "postgres")
	if err != nil {
		return scheduler.Transient(err)
	}
	var level string
	err = conn.QueryRow(ctx, "SHOW wal_level").Scan(&level)
	conn.Close(context.WithoutCancel(ctx))
	if err != nil || level == "logical" {
		return err
	}
	progress(run, "restart for wal_level logical", nil)
	return s.restart(ctx, run, prj, inst)
}

// copyRoles copies the roles, their attributes, passwords (SCRAM verifiers, kept as they are), memberships
// and settings with the old major's pg_dumpall. The admin role exists already (initdb): its CREATE ROLE is
// left out, its ALTER ROLE (the same password) kept.
func (s *Service) copyRoles(ctx context.Context, run *scheduler.Run, dp *Plane, old *postgres.Instance, inst, next *store.Instance) error {
	prog, err := old.Bin.Path("pg_dumpall")
	if err != nil {
		return err
	}
	file := filepath.Join(next.Dir, "roles.sql")
	defer os.Remove(file)
	cmd, err := s.toolCommand(dp, inst, prog, "--roles-only", "--no-password", "-h", "127.0.0.1", "-p", strconv.Itoa(inst.Port), "-U", postgres.AdminRole, "-f", file)
	if err != nil {
		return err
	}
	cmd.Dir = next.Dir
	if err := run.Exec(ctx, cmd); err != nil {
		return err
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	skip := "CREATE ROLE " + postgres.AdminRole + ";"
	var sql strings.Builder
	for _, line := range strings.Split(string(b), "\n") {
		// psql's meta-commands (\connect, and \restrict … \unrestrict since 15.14) are not SQL.
		if l := strings.TrimSpace(line); l != skip && !strings.HasPrefix(l, `\`) {
			sql.WriteString(line + "\n")
		}
	}
	conn, err := s.host.AdminConn(ctx, next, "postgres")
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := instances.Untracked(ctx, conn); err != nil { // the verifiers must not reach the logs
		return err
	}
	_, err = conn.Exec(ctx, sql.String())
	return err
}

// toolCommand runs one of the old major's client programs as the instances' user, with the admin password.
func (s *Service) toolCommand(dp *Plane, inst *store.Instance, prog string, args ...string) (*exec.Cmd, error) {
	pw, err := s.box.Open(inst.AdminPassword)
	if err != nil {
		return nil, err
	}
	cmd := dp.User.Command(prog, args...)
	cmd.Env = append(cmd.Env, "PGPASSWORD="+string(pw), "PGPASSFILE=/dev/null", "PGSSLMODE=prefer")
	return cmd, nil
}

// copySchema dumps one database's schema (owners, privileges, extensions; no data) with the old major's
// pg_dump and restores it into the new server with its pg_restore (the database created with its
// properties, except postgres, which exists).
func (s *Service) copySchema(ctx context.Context, run *scheduler.Run, dp *Plane, old *postgres.Instance, inst *store.Instance, nextDir string, port int, db string) error {
	pgdump, err := old.Bin.Path("pg_dump")
	if err != nil {
		return err
	}
	pgrestore, err := old.Bin.Path("pg_restore")
	if err != nil {
		return err
	}
	dump := filepath.Join(nextDir, "schema.dump")
	defer os.Remove(dump)
	cmd, err := s.toolCommand(dp, inst, pgdump, "--schema-only", "-Fc", "--no-publications", "--no-subscriptions", "--no-password",
		"-h", "127.0.0.1", "-p", strconv.Itoa(inst.Port), "-U", postgres.AdminRole, "-f", dump, "--dbname="+db)
	if err != nil {
		return err
	}
	cmd.Dir = nextDir
	if err := run.Exec(ctx, cmd); err != nil {
		return err
	}
	args := []string{"--exit-on-error", "--no-password", "-h", "127.0.0.1", "-p", strconv.Itoa(port), "-U", postgres.AdminRole}
	if db == "postgres" {
		args = append(args, "--dbname=postgres")
	} else {
		args = append(args, "--create", "--dbname=postgres")
	}
	cmd, err = s.toolCommand(dp, inst, pgrestore, append(args, dump)...)
	if err != nil {
		return err
	}
	return run.Exec(ctx, cmd)
}
