package migrate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/extensions"
	"github.com/theappliance/appliance/appliance/instances"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// followCutoverWait bounds how long a cutover waits for the initial copy and for zero lag.
var followCutoverWait = 10 * time.Minute

// followStartJob copies the source's app schemas (pg_dump --schema-only, restored like an import),
// publishes their tables on the source and subscribes the project's database to them. A failure marks the
// follow failed and removes the publication and subscription it made; the copied schema stays until an
// abort restores the pre-follow backup.
func (s *Service) followStartJob(ctx context.Context, run *scheduler.Run) (any, error) {
	var in followPayload
	prj, inst, err := s.host.ActiveTarget(run, &in)
	if err != nil {
		return nil, err
	}
	f, err := s.loadFollow(in.FollowID)
	if err != nil {
		return nil, err
	}
	if f.State != api.FollowStarting {
		return map[string]any{"skipped": "follow is " + f.State}, nil
	}
	res, err := s.startFollowing(ctx, run, prj, inst, f)
	if err == nil {
		return res, nil
	}
	if ctx.Err() != nil {
		return nil, err // the runner stops: the next attempt starts over
	}
	if target, cerr := s.host.AdminConn(context.WithoutCancel(ctx), inst, prj.DatabaseName); cerr == nil {
		if src, serr := s.followSource(f); serr == nil {
			_, _ = s.detachFollow(context.WithoutCancel(ctx), target, src, f)
		}
		target.Close(context.WithoutCancel(ctx))
	}
	msg := err.Error()
	if uerr := s.updateFollow(f.ID, func(f *store.ImportFollow) {
		if f.State == api.FollowStarting { // an abort accepted meanwhile cleans up instead
			f.State = api.FollowFailed
		}
		f.Error = msg
	}); uerr != nil {
		s.log.Error("mark follow failed", "follow", f.ID, "err", uerr)
	}
	if f.SchemaCopied {
		return nil, fmt.Errorf("%w (imports/follow/abort restores the project as it was before follow)", err)
	}
	return nil, err
}

func (s *Service) startFollowing(ctx context.Context, run *scheduler.Run, prj *store.Project, inst *store.Instance, f *store.ImportFollow) (any, error) {
	steps := instances.NewTimer()
	var b *store.Backup
	if err := s.db.View(func(tx *store.Tx) (err error) { b, err = store.Backups.Get(tx, f.BackupID); return err }); err != nil {
		return nil, fmt.Errorf("the backup before follow: %w", err)
	}
	if b.State != api.BackupCompleted {
		return nil, fmt.Errorf("the backup before follow (%s) is %s, not completed: %s", b.BackupKey, b.State, b.Error)
	}
	src, err := s.followSource(f)
	if err != nil {
		return nil, fmt.Errorf("open the source URL: %w", err)
	}
	target, err := s.host.AdminConn(ctx, inst, prj.DatabaseName)
	if err != nil {
		return nil, err
	}
	defer target.Close(context.WithoutCancel(ctx))
	if exists, err := subscriptionExists(ctx, target, f.Subscription); err != nil {
		return nil, err
	} else if exists { // an earlier attempt got as far as the subscription
		if err := startSubscription(ctx, target, f); err != nil {
			return nil, err
		}
		return s.markFollowing(f, nil, steps)
	}
	pf, err := s.Check(ctx, prj, target, src)
	if err != nil {
		return nil, err
	}
	if err := followReady(pf); err != nil {
		return nil, err
	}
	steps.Done("preflight")
	// From here on the project's database changes: an abort restores the pre-follow backup.
	if err := s.updateFollow(f.ID, func(f *store.ImportFollow) { f.SchemaCopied = true }); err != nil {
		return nil, err
	}
	f.SchemaCopied = true
	if err := s.createExtensions(ctx, inst, prj.DatabaseName, pf.Source.Extensions); err != nil {
		return nil, err
	}
	if err := s.copySchema(ctx, run, prj, inst, f, src, pf.Source.AppSchemas); err != nil {
		return nil, err
	}
	steps.Done("schema")
	source, err := src.Connect(ctx)
	if err != nil {
		return nil, src.ConnectErr(err)
	}
	defer source.Close(context.WithoutCancel(ctx))
	tables, err := QueryStrings(ctx, source, `SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind = 'r' AND n.nspname = ANY($1) ORDER BY 1`, pf.Source.AppSchemas)
	if err != nil {
		return nil, src.RedactErr(err)
	}
	pub := pgx.Identifier{f.Publication}.Sanitize()
	create := "CREATE PUBLICATION " + pub
	if len(tables) > 0 {
		create += " FOR TABLE " + strings.Join(tables, ", ")
	}
	// A slot left by an attempt that crashed inside CREATE SUBSCRIPTION would make it fail.
	for _, stmt := range []string{"DROP PUBLICATION IF EXISTS " + pub, create} {
		if _, err := source.Exec(ctx, stmt); err != nil {
			return nil, fmt.Errorf("on the source: %w", src.RedactErr(err))
		}
	}
	if _, err := source.Exec(ctx, dropIdleSlot, f.Subscription); err != nil {
		return nil, fmt.Errorf("on the source: %w", src.RedactErr(err))
	}
	sub := pgx.Identifier{f.Subscription}.Sanitize()
	// The statement holds the source's password: it must not be written to the server's log when it fails,
	// nor show in pg_stat_activity or pg_stat_statements.
	if err := instances.Untracked(ctx, target); err != nil {
		return nil, err
	}
	// The subscription's workers run as its owner, and they run code of the project's role (a CHECK
	// constraint's function, an index expression on a followed table): the owner is a role of its own that
	// is a superuser only while CREATE SUBSCRIPTION needs it (PostgreSQL 15), and a member of the project's
	// role (its table rights) once the workers start.
	owner := pgx.Identifier{f.Subscription}.Sanitize()
	for _, stmt := range []string{
		"DROP ROLE IF EXISTS " + owner, // an attempt that crashed before its subscription existed
		"CREATE ROLE " + owner + " LOGIN SUPERUSER",
		"GRANT " + pgx.Identifier{prj.RoleName}.Sanitize() + " TO " + owner,
		"SET SESSION AUTHORIZATION " + owner,
	} {
		if _, err := target.Exec(ctx, stmt); err != nil {
			return nil, fmt.Errorf("prepare the subscription's owner: %w", err)
		}
	}
	_, err = target.Exec(ctx, "CREATE SUBSCRIPTION "+sub+" CONNECTION "+instances.QuoteLiteral(src.Conninfo())+
		" PUBLICATION "+pub+" WITH (slot_name = "+instances.QuoteLiteral(f.Subscription)+", enabled = false)")
	if _, rerr := target.Exec(ctx, "RESET SESSION AUTHORIZATION"); err == nil {
		err = rerr
	}
	if err != nil {
		return nil, fmt.Errorf("create the subscription: %w", src.RedactErr(err))
	}
	if err := startSubscription(ctx, target, f); err != nil {
		return nil, err
	}
	steps.Done("subscribe")
	return s.markFollowing(f, tables, steps)
}

// createExtensions creates the source's extensions in the project's database, as the extension job does.
func (s *Service) createExtensions(ctx context.Context, inst *store.Instance, database string, exts []api.SourceExtension) error {
	if len(exts) == 0 {
		return nil
	}
	conn, err := extensions.Conn(ctx, s.box, inst, database)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, e := range exts {
		if err := extensions.DDL(ctx, conn, extensions.CreateSQL(pgx.Identifier{e.Name}.Sanitize())); err != nil {
			return fmt.Errorf("enable extension %s: %w", e.Name, err)
		}
	}
	return nil
}

// startSubscription takes superuser from the subscription's owner, then starts its workers.
func startSubscription(ctx context.Context, target *pgx.Conn, f *store.ImportFollow) error {
	for _, stmt := range []string{"ALTER ROLE " + pgx.Identifier{f.Subscription}.Sanitize() + " NOSUPERUSER",
		"ALTER SUBSCRIPTION " + pgx.Identifier{f.Subscription}.Sanitize() + " ENABLE"} {
		if _, err := target.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("start the subscription: %w", err)
		}
	}
	return nil
}

func (s *Service) markFollowing(f *store.ImportFollow, tables []string, steps *instances.Timer) (any, error) {
	state := ""
	if err := s.updateFollow(f.ID, func(f *store.ImportFollow) {
		if f.State == api.FollowStarting { // an abort accepted meanwhile stays: its job removes the subscription
			f.State, f.Error = api.FollowFollowing, ""
		}
		state = f.State
	}); err != nil {
		return nil, err
	}
	return map[string]any{"follow_id": f.ID, "state": state, "publication": f.Publication,
		"subscription": f.Subscription, "tables": len(tables), "backup_id": f.BackupID, "timings_ms": steps.MS}, nil
}

// copySchema dumps the source's app schemas without data, owners or privileges and restores the dump over
// the project's database in one transaction (objects owned by the project's role).
func (s *Service) copySchema(ctx context.Context, run *scheduler.Run, prj *store.Project, inst *store.Instance, f *store.ImportFollow, src *SourceURL, schemas []string) error {
	if err := src.Pin(ctx); err != nil {
		return src.ConnectErr(err)
	}
	pgi := s.eng.Instance(inst)
	pgdump, err := pgi.Bin.Path("pg_dump")
	if err != nil {
		return err
	}
	dir := ImportDir(s.dataDir, prj.ID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := s.plane.User.Chown(dir); err != nil {
		return err
	}
	dump := filepath.Join(dir, f.ID+".schema.dump")
	defer os.Remove(dump)
	args := []string{"--schema-only", "-Fc", "--no-owner", "--no-privileges", "--no-tablespaces", "--no-publications", "--no-subscriptions",
		"-f", dump, "--no-password"}
	for _, n := range schemas {
		args = append(args, "--schema="+pgx.Identifier{n}.Sanitize())
	}
	cmd := s.plane.User.Command(pgdump, append(args, "--dbname="+src.ConninfoWithoutPassword())...)
	cmd.Env = append(cmd.Env, "PGPASSWORD="+src.Password(), "PGPASSFILE=/dev/null")
	if err := run.Exec(ctx, cmd); err != nil {
		return fmt.Errorf("dump the source's schema: %w", src.RedactErr(err))
	}
	return s.restoreDump(ctx, run, prj, inst, prj.DatabaseName, dump, nil)
}

// dropIdleSlot drops the follow's replication slot on the source unless a walsender uses it.
const dropIdleSlot = "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active"

func subscriptionExists(ctx context.Context, target *pgx.Conn, name string) (bool, error) {
	var ok bool
	err := target.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_subscription WHERE subname = $1)", name).Scan(&ok)
	return ok, err
}

// detachFollow drops the subscription (which drops its slot on the source) and the publication. The source
// never stops it: when the slot cannot be dropped through the subscription, the subscription is dropped
// without it, and the warnings say what is left on the source to remove by hand.
func (s *Service) detachFollow(ctx context.Context, target *pgx.Conn, src *SourceURL, f *store.ImportFollow) ([]string, error) {
	warnings := []string{}
	sub := pgx.Identifier{f.Subscription}.Sanitize()
	exists, err := subscriptionExists(ctx, target, f.Subscription)
	if err != nil {
		return nil, err
	}
	if exists {
		if _, err := target.Exec(ctx, "ALTER SUBSCRIPTION "+sub+" DISABLE"); err != nil {
			return nil, err
		}
		if _, err := target.Exec(ctx, "DROP SUBSCRIPTION "+sub); err != nil {
			warnings = append(warnings, fmt.Sprintf("the source's replication slot %s could not be dropped (%v): drop it there with SELECT pg_drop_replication_slot('%s')",
				f.Subscription, src.RedactErr(err), f.Subscription))
			for _, stmt := range []string{"ALTER SUBSCRIPTION " + sub + " SET (slot_name = NONE)", "DROP SUBSCRIPTION " + sub} {
				if _, err := target.Exec(ctx, stmt); err != nil {
					return nil, err
				}
			}
		}
	}
	// The subscription's own role (see startFollowing) goes with it.
	if _, err := target.Exec(ctx, "DROP ROLE IF EXISTS "+sub); err != nil {
		warnings = append(warnings, fmt.Sprintf("drop role %s: %v", f.Subscription, err))
	}
	source, err := src.Connect(ctx)
	if err != nil {
		return append(warnings, fmt.Sprintf("%v: drop publication %s there", src.ConnectErr(err), f.Publication)), nil
	}
	defer source.Close(context.WithoutCancel(ctx))
	if _, err := source.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{f.Publication}.Sanitize()); err != nil {
		warnings = append(warnings, fmt.Sprintf("on the source: %v", src.RedactErr(err)))
	}
	if _, err := source.Exec(ctx, dropIdleSlot, f.Subscription); err != nil {
		warnings = append(warnings, fmt.Sprintf("on the source: %v", src.RedactErr(err)))
	}
	return warnings, nil
}

var subStates = map[string]string{"i": "init", "d": "copying", "f": "copied", "s": "synchronized", "r": "ready"}

// measureFollow reads the subscription's state on the project's server and the slot's lag on the source.
func (s *Service) measureFollow(ctx context.Context, target *pgx.Conn, src *SourceURL, f *store.ImportFollow) (*api.FollowReport, error) {
	rep := &api.FollowReport{FollowID: f.ID, State: f.State, Source: f.SourceRedacted, Subscription: f.Subscription,
		Tables: []api.FollowTable{}, Error: f.Error}
	if f.State != api.FollowFollowing && f.State != api.FollowCuttingOver {
		return rep, nil
	}
	err := target.QueryRow(ctx, `SELECT s.subenabled, st.pid IS NOT NULL, st.last_msg_receipt_time
		FROM pg_subscription s LEFT JOIN pg_stat_subscription st ON st.subid = s.oid AND st.relid IS NULL
		WHERE s.subname = $1`, f.Subscription).Scan(&rep.Enabled, &rep.WorkerRunning, &rep.LastMessageAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("subscription %s is missing on the project's server", f.Subscription)
	}
	if err != nil {
		return nil, err
	}
	rows, err := target.Query(ctx, `SELECT format('%I.%I', n.nspname, c.relname), r.srsubstate::text
		FROM pg_subscription_rel r JOIN pg_subscription s ON s.oid = r.srsubid
		JOIN pg_class c ON c.oid = r.srrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE s.subname = $1 ORDER BY 1`, f.Subscription)
	if err != nil {
		return nil, err
	}
	if rep.Tables, err = pgx.CollectRows(rows, pgx.RowToStructByPos[api.FollowTable]); err != nil {
		return nil, err
	}
	for i, t := range rep.Tables {
		rep.Tables[i].State = subStates[t.State]
		if t.State == "r" || t.State == "s" {
			rep.TablesReady++
		}
	}
	source, err := src.Connect(ctx)
	if err != nil {
		rep.SourceError = src.ConnectErr(err).Error()
		return rep, nil
	}
	defer source.Close(context.WithoutCancel(ctx))
	var lag int64
	err = source.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text, coalesce(confirmed_flush_lsn::text, ''),
		coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn), -1)::bigint
		FROM pg_replication_slots WHERE slot_name = $1`, f.Subscription).Scan(&rep.SourceLSN, &rep.ConfirmedLSN, &lag)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		rep.SourceError = "the replication slot " + f.Subscription + " is missing on the source"
	case err != nil:
		rep.SourceError = src.RedactErr(err).Error()
	case lag >= 0:
		rep.LagBytes = &lag
	}
	return rep, nil
}

// followTargets loads what every follow job after the first needs.
func (s *Service) followTargets(ctx context.Context, run *scheduler.Run) (*store.Project, *store.ImportFollow, *SourceURL, *pgx.Conn, error) {
	var in followPayload
	prj, inst, err := s.host.ActiveTarget(run, &in)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	f, err := s.loadFollow(in.FollowID)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	src, err := s.followSource(f)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("open the source URL: %w", err)
	}
	target, err := s.host.AdminConn(ctx, inst, prj.DatabaseName)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	return prj, f, src, target, nil
}

// followStatusJob reports the follow's state as its result.
func (s *Service) followStatusJob(ctx context.Context, run *scheduler.Run) (any, error) {
	_, f, src, target, err := s.followTargets(ctx, run)
	if err != nil {
		return nil, err
	}
	defer target.Close(context.WithoutCancel(ctx))
	return s.measureFollow(ctx, target, src, f)
}

// followCutoverJob waits until every table is synchronized and the subscription has confirmed the WAL the
// source had written when the cutover began, sets the project's sequences to the source's values, and
// drops the subscription and the publication. Writes to the source should stop before the cutover:
// anything written after its start may not arrive. A cutover that does not reach zero lag in
// followCutoverWait fails and the follow goes on.
func (s *Service) followCutoverJob(ctx context.Context, run *scheduler.Run) (any, error) {
	prj, f, src, target, err := s.followTargets(ctx, run)
	if err != nil {
		return nil, err
	}
	defer target.Close(context.WithoutCancel(ctx))
	switch f.State {
	case api.FollowFollowing:
		if err := s.updateFollow(f.ID, func(f *store.ImportFollow) { f.State = api.FollowCuttingOver }); err != nil {
			return nil, err
		}
		f.State = api.FollowCuttingOver
	case api.FollowCuttingOver: // an attempt before a crash
	default:
		return nil, fmt.Errorf("the follow is %s: nothing to cut over", f.State)
	}
	var res any
	gone, err := subscriptionExists(ctx, target, f.Subscription)
	gone = err == nil && !gone
	if gone {
		// An attempt that crashed after dropping the subscription: its sequences were copied before that.
		res = map[string]any{"follow_id": f.ID, "state": api.FollowCompleted, "resumed": true}
	} else {
		res, err = s.cutover(ctx, target, src, f)
	}
	if err != nil {
		if ctx.Err() == nil {
			if uerr := s.updateFollow(f.ID, func(f *store.ImportFollow) {
				if f.State == api.FollowCuttingOver {
					f.State = api.FollowFollowing
				}
			}); uerr != nil {
				s.log.Error("put follow back to following", "follow", f.ID, "err", uerr)
			}
		}
		return nil, err
	}
	if err := s.updateFollow(f.ID, func(f *store.ImportFollow) { f.State = api.FollowCompleted }); err != nil {
		return nil, err
	}
	if err := s.db.Update(func(tx *store.Tx) error {
		return s.host.Audit(tx, &authz.Principal{AuthSource: authz.ActorSystem}, "import.follow_completed", prj.OrganizationID, prj.ID,
			map[string]any{"follow_id": f.ID, "job_id": run.Job.ID})
	}); err != nil {
		return nil, err
	}
	return res, nil
}

func (s *Service) cutover(ctx context.Context, target *pgx.Conn, src *SourceURL, f *store.ImportFollow) (any, error) {
	source, err := src.Connect(ctx)
	if err != nil {
		return nil, src.ConnectErr(err)
	}
	defer source.Close(context.WithoutCancel(ctx))
	var goal string
	if err := source.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&goal); err != nil {
		return nil, src.RedactErr(err)
	}
	deadline := time.Now().Add(followCutoverWait)
	var rep *api.FollowReport
	for {
		if rep, err = s.measureFollow(ctx, target, src, f); err != nil {
			return nil, err
		}
		var behind *int64 // bytes the slot's confirmed position is short of goal; <= 0 once it got there
		if rep.SourceError == "" {
			if err := source.QueryRow(ctx, `SELECT pg_wal_lsn_diff($1::pg_lsn, confirmed_flush_lsn)::bigint
				FROM pg_replication_slots WHERE slot_name = $2`, goal, f.Subscription).Scan(&behind); err != nil {
				return nil, src.RedactErr(err)
			}
		}
		if rep.TablesReady == len(rep.Tables) && behind != nil && *behind <= 0 {
			break
		}
		if time.Now().After(deadline) {
			lag := "unknown"
			if behind != nil {
				lag = strconv.FormatInt(*behind, 10)
			}
			return nil, fmt.Errorf("no zero lag within %s: %d of %d tables synchronized, %s bytes short of %s%s",
				followCutoverWait, rep.TablesReady, len(rep.Tables), lag, goal, suffixIf(rep.SourceError))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(followPollEvery):
		}
	}
	n, err := syncSequences(ctx, source, target, src)
	if err != nil {
		return nil, err
	}
	// Once the subscription is gone the cutover is done: what could not be removed on the source is a
	// warning, not a reason to go back to following.
	warnings, err := s.detachFollow(ctx, target, src, f)
	if err != nil {
		if _, eerr := target.Exec(context.WithoutCancel(ctx), "ALTER SUBSCRIPTION "+pgx.Identifier{f.Subscription}.Sanitize()+" ENABLE"); eerr != nil {
			s.log.Warn("enable the subscription again after a failed cutover", "follow", f.ID, "err", eerr)
		}
		return nil, err
	}
	return map[string]any{"follow_id": f.ID, "state": api.FollowCompleted, "source_lsn": goal, "lag_bytes": 0,
		"tables": rep.Tables, "sequences_synced": n, "warnings": warnings}, nil
}

func suffixIf(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

// syncSequences sets every sequence of the subscribed schemas on the target to the source's last value
// (logical replication does not carry sequences).
func syncSequences(ctx context.Context, source, target *pgx.Conn, src *SourceURL) (int, error) {
	type seq struct {
		Schema, Name string
		Last         int64
	}
	rows, err := source.Query(ctx, `SELECT schemaname::text, sequencename::text, last_value FROM pg_sequences
		WHERE last_value IS NOT NULL AND schemaname NOT IN ('pg_catalog', 'information_schema')`)
	if err != nil {
		return 0, src.RedactErr(err)
	}
	seqs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[seq])
	if err != nil {
		return 0, src.RedactErr(err)
	}
	n := 0
	for _, q := range seqs {
		var exists bool
		name := pgx.Identifier{q.Schema, q.Name}.Sanitize()
		if err := target.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", name).Scan(&exists); err != nil {
			return n, err
		}
		if !exists {
			continue // a sequence of a schema that was not copied
		}
		if _, err := target.Exec(ctx, "SELECT setval($1::regclass, $2, true)", name, q.Last); err != nil {
			return n, fmt.Errorf("set sequence %s: %w", name, err)
		}
		n++
	}
	return n, nil
}

// followAbortJob drops the subscription and the publication (a source that cannot be reached leaves
// warnings, not a failure) and, when follow had changed the database, enqueues backup.restore of the
// backup taken before it. The follow is aborted from then on.
func (s *Service) followAbortJob(ctx context.Context, run *scheduler.Run) (_ any, err error) {
	var in followPayload
	if err := run.DecodePayload(&in); err != nil {
		return nil, err
	}
	defer func() {
		if err == nil || ctx.Err() != nil {
			return
		}
		// Not left aborting for good: the follow is failed, and abort can be asked again.
		msg := "abort failed: " + err.Error()
		if uerr := s.updateFollow(in.FollowID, func(f *store.ImportFollow) {
			if f.State == api.FollowAborting {
				f.State, f.Error = api.FollowFailed, msg
			}
		}); uerr != nil && !errors.Is(uerr, store.ErrNotFound) {
			s.log.Error("mark follow failed", "follow", in.FollowID, "err", uerr)
		}
	}()
	prj, f, src, target, err := s.followTargets(ctx, run)
	if err != nil {
		return nil, err
	}
	defer target.Close(context.WithoutCancel(ctx))
	if f.State != api.FollowAborting {
		return nil, fmt.Errorf("the follow became %s before the abort ran: nothing was aborted", f.State)
	}
	warnings, err := s.detachFollow(ctx, target, src, f)
	if err != nil {
		return nil, err
	}
	out := map[string]any{"follow_id": f.ID, "state": api.FollowAborted, "warnings": warnings}
	err = s.db.Update(func(tx *store.Tx) error {
		delete(out, "restore_job_id") // a run again starts over
		cur, err := store.ImportFollows.Get(tx, f.ID)
		if err != nil {
			return err
		}
		p, err := store.Projects.Get(tx, prj.ID)
		if err != nil {
			return err
		}
		if cur.SchemaCopied {
			j, err := s.host.EnqueueBackupRestore(tx, p, cur.BackupID)
			if err != nil {
				return err
			}
			out["restore_job_id"] = j.ID
		}
		now := s.now()
		cur.State, cur.UpdatedAt, cur.FinishedAt = api.FollowAborted, now, &now
		if err := store.ImportFollows.Put(tx, cur); err != nil {
			return err
		}
		return s.host.Audit(tx, &authz.Principal{AuthSource: authz.ActorSystem}, "import.follow_aborted", p.OrganizationID, p.ID,
			map[string]any{"follow_id": f.ID, "job_id": run.Job.ID, "restore_job_id": out["restore_job_id"]})
	})
	if err != nil {
		return nil, err
	}
	s.notify()
	return out, nil
}

// DetachOpenFollow, for the project's deletion, drops the subscription and the source's publication and
// slot of a follow that is not finished (a slot left behind would make the source keep its WAL forever).
// It never stops the deletion: what it could not do is returned as warnings.
func (s *Service) DetachOpenFollow(ctx context.Context, prj *store.Project, inst *store.Instance) []string {
	var f *store.ImportFollow
	if err := s.db.View(func(tx *store.Tx) (err error) { f, err = CurrentFollow(tx, prj.ID); return err }); err != nil || f == nil ||
		FollowFinished(f.State) {
		return nil
	}
	src, err := s.followSource(f)
	if err != nil {
		return []string{"open the source URL: " + err.Error()}
	}
	if inst == nil {
		return []string{"no instance: drop publication " + f.Publication + " and slot " + f.Subscription + " on the source"}
	}
	target, err := s.host.AdminConn(ctx, inst, prj.DatabaseName)
	if err != nil {
		return []string{fmt.Sprintf("the project's server does not answer (%v): drop publication %s and slot %s on the source", err, f.Publication, f.Subscription)}
	}
	defer target.Close(context.WithoutCancel(ctx))
	warnings, err := s.detachFollow(ctx, target, src, f)
	if err != nil {
		warnings = append(warnings, err.Error())
	}
	return warnings
}
