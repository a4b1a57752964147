package upgrades

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/instances"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// errSwapped marks a cutover's failure after the swap: the project runs on the new server, which must
// not be removed.
var errSwapped = errors.New("the project runs on the new major")

// dropIdleSlot drops a replication slot unless a walsender uses it.
const dropIdleSlot = "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active"

// slotName is the name of the subscription (and its slot) of one database, by the OID of the database on
// the publishing server.
func slotName(ctx context.Context, pub *pgx.Conn, prefix string) (string, error) {
	var oid uint32
	if err := pub.QueryRow(ctx, "SELECT oid FROM pg_database WHERE datname = current_database()").Scan(&oid); err != nil {
		return "", err
	}
	return prefix + "_" + strconv.FormatUint(uint64(oid), 10), nil
}

// publish publishes every table of database db on pubRec's server (dropping what an earlier attempt left)
// and, withSlot, creates the subscription's slot there now: the changes from this moment on are kept for a
// subscriber made later (the rollback's, made once the project is open again). It returns the slot's name.
func (s *Service) publish(ctx context.Context, pubRec *store.Instance, db, prefix string, withSlot bool) (string, error) {
	pc, err := s.host.AdminConn(ctx, pubRec, db)
	if err != nil {
		return "", err
	}
	defer pc.Close(context.WithoutCancel(ctx))
	slot, err := slotName(ctx, pc, prefix)
	if err != nil {
		return "", err
	}
	pub := pgx.Identifier{prefix}.Sanitize()
	for _, stmt := range []string{"DROP PUBLICATION IF EXISTS " + pub, "CREATE PUBLICATION " + pub + " FOR ALL TABLES"} {
		if _, err := pc.Exec(ctx, stmt); err != nil {
			return "", fmt.Errorf("publish: %w", err)
		}
	}
	if _, err := pc.Exec(ctx, dropIdleSlot, slot); err != nil { // left by an attempt that crashed
		return "", err
	}
	if withSlot {
		if _, err := pc.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", slot); err != nil {
			return "", fmt.Errorf("create the slot %s: %w", slot, err)
		}
	}
	return slot, nil
}

// subscribe subscribes subRec's server to the publication prefix of database db on pubRec's: the rows
// copied first when copyData (the forward subscription, which creates its slot), else only the changes
// kept by the slot publish made (the rollback's).
func (s *Service) subscribe(ctx context.Context, pubRec, subRec *store.Instance, db, slot, prefix string, copyData bool) error {
	sc, err := s.host.AdminConn(ctx, subRec, db)
	if err != nil {
		return err
	}
	defer sc.Close(context.WithoutCancel(ctx))
	// The statement holds the admin password: not for the logs nor pg_stat_statements.
	if err := instances.Untracked(ctx, sc); err != nil {
		return err
	}
	ci, err := s.conninfo(pubRec, pubRec.Port, db)
	if err != nil {
		return err
	}
	with := "copy_data = " + strconv.FormatBool(copyData)
	if !copyData {
		with += ", create_slot = false, slot_name = " + instances.QuoteLiteral(slot)
	}
	_, err = sc.Exec(ctx, "CREATE SUBSCRIPTION "+pgx.Identifier{slot}.Sanitize()+" CONNECTION "+instances.QuoteLiteral(ci)+
		" PUBLICATION "+pgx.Identifier{prefix}.Sanitize()+" WITH ("+with+")")
	if err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	return nil
}

// unsubscribe drops the subscriptions named prefix_* of subRec's server (dropping their slots on the
// publisher when it answers, else leaving them to dropSlots) and the publications of pubRec's server.
func (s *Service) unsubscribe(ctx context.Context, pubRec, subRec *store.Instance, dbs []string, prefix string) error {
	var errs []error
	for _, db := range dbs {
		if subRec != nil {
			if err := s.dropSubscriptions(ctx, subRec, db, prefix); err != nil {
				errs = append(errs, err)
			}
		}
		if pubRec != nil {
			if pc, err := s.host.AdminConn(ctx, pubRec, db); err == nil {
				if _, err := pc.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{prefix}.Sanitize()); err != nil {
					errs = append(errs, err)
				}
				pc.Close(context.WithoutCancel(ctx))
			} else {
				errs = append(errs, err)
			}
		}
	}
	if pubRec != nil {
		errs = append(errs, s.dropSlots(ctx, pubRec, prefix))
	}
	return errors.Join(errs...)
}

func (s *Service) dropSubscriptions(ctx context.Context, rec *store.Instance, db, prefix string) error {
	sc, err := s.host.AdminConn(ctx, rec, db)
	if err != nil {
		return err
	}
	defer sc.Close(context.WithoutCancel(ctx))
	subs, err := queryStrings(ctx, sc, `SELECT subname::text FROM pg_subscription
		WHERE subdbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND subname LIKE $1`, prefix+`\_%`)
	if err != nil {
		return err
	}
	for _, sub := range subs {
		id := pgx.Identifier{sub}.Sanitize()
		if _, err := sc.Exec(ctx, "ALTER SUBSCRIPTION "+id+" DISABLE"); err != nil {
			return err
		}
		if _, err := sc.Exec(ctx, "DROP SUBSCRIPTION "+id); err != nil {
			// The publisher is gone or refuses: drop the subscription without its slot (dropSlots removes it).
			for _, stmt := range []string{"ALTER SUBSCRIPTION " + id + " SET (slot_name = NONE)", "DROP SUBSCRIPTION " + id} {
				if _, err := sc.Exec(ctx, stmt); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// dropSlots drops the idle slots named prefix_* of rec's server.
func (s *Service) dropSlots(ctx context.Context, rec *store.Instance, prefix string) error {
	conn, err := s.host.AdminConn(ctx, rec, "postgres")
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name LIKE $1 AND NOT active`, prefix+`\_%`)
	return err
}

// dropForward removes what the forward replication made on the old server: its publications and its
// slots (a failed upgrade's cleanup, once the new server, with its subscriptions, is removed or stopped). A
// slot still in use by the walsender of a subscriber that just stopped is freed first.
func (s *Service) dropForward(ctx context.Context, old *store.Instance, dbs []string) error {
	if err := s.unsubscribe(ctx, old, nil, dbs, forwardName); err != nil {
		return err
	}
	conn, err := s.host.AdminConn(ctx, old, "postgres")
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return waitUntil(ctx, 30*time.Second, func() error {
		if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name LIKE $1 AND active`, forwardName+`\_%`); err != nil {
			return err
		}
		var left int
		if err := conn.QueryRow(ctx, `SELECT count(pg_drop_replication_slot(slot_name)) FILTER (WHERE NOT active), count(*) FILTER (WHERE active)
			FROM pg_replication_slots WHERE slot_name LIKE $1`, forwardName+`\_%`).Scan(new(int), &left); err != nil {
			return err
		}
		if left > 0 {
			return fmt.Errorf("%d replication slots %s_* still in use", left, forwardName)
		}
		return nil
	})
}

// syncState is how far the subscriptions of a server got.
type syncState struct {
	Tables, Synchronized int
	LagBytes             int64
}

// measure reads the subscriptions' tables on subRec's server (pg_subscription_rel) and the lag of their
// slots on pubRec's (bytes of WAL the subscriber has not confirmed).
func (s *Service) measure(ctx context.Context, pubRec, subRec *store.Instance, dbs []string, prefix string) (syncState, error) {
	var st syncState
	for _, db := range dbs {
		sc, err := s.host.AdminConn(ctx, subRec, db)
		if err != nil {
			return st, err
		}
		var n, ready int
		err = sc.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE r.srsubstate IN ('r', 's'))
			FROM pg_subscription_rel r JOIN pg_subscription s ON s.oid = r.srsubid WHERE s.subname LIKE $1`, prefix+`\_%`).Scan(&n, &ready)
		sc.Close(context.WithoutCancel(ctx))
		if err != nil {
			return st, err
		}
		st.Tables += n
		st.Synchronized += ready
	}
	pc, err := s.host.AdminConn(ctx, pubRec, "postgres")
	if err != nil {
		return st, err
	}
	defer pc.Close(context.WithoutCancel(ctx))
	err = pc.QueryRow(ctx, `SELECT coalesce(max(coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn), pg_current_wal_lsn() - '0/0'::pg_lsn)), 0)::bigint
		FROM pg_replication_slots WHERE slot_name LIKE $1`, prefix+`\_%`).Scan(&st.LagBytes)
	return st, err
}

// waitSynchronized waits until every table is copied and the subscriber (sub) follows the publisher (pub)
// closely through its subscriptions prefix_*, reporting the tables synchronized and the lag on the job:
// the new server before the cutover (forwardName), the old one before a rollback (rollbackName).
func (s *Service) waitSynchronized(ctx context.Context, run *scheduler.Run, pub, sub *store.Instance, dbs []string, prefix string) (syncState, error) {
	which := "new"
	if prefix == rollbackName {
		which = "old"
	}
	deadline := time.Now().Add(catchUpWait)
	for {
		st, err := s.measure(ctx, pub, sub, dbs, prefix)
		if err != nil {
			return st, fmt.Errorf("the catch-up of the %s server: %w", which, err)
		}
		progress(run, "catch-up", map[string]any{"tables": st.Tables, "tables_synchronized": st.Synchronized, "lag_bytes": st.LagBytes})
		if st.Synchronized == st.Tables && st.LagBytes < 1<<20 {
			return st, nil
		}
		if time.Now().After(deadline) {
			return st, fmt.Errorf("the %s server did not catch up within %s: %d of %d tables synchronized, %d bytes behind", which, catchUpWait, st.Synchronized, st.Tables, st.LagBytes)
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-time.After(pollEvery):
		}
	}
}

// drain waits, writes paused, until every slot prefix_* of pubRec's server has confirmed the WAL written
// up to now. With subRec (the subscriber), it gives up as soon as that server stops answering.
func (s *Service) drain(ctx context.Context, pubRec, subRec *store.Instance, prefix string) error {
	conn, err := s.host.AdminConn(ctx, pubRec, "postgres")
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var goal string
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&goal); err != nil {
		return err
	}
	// The WAL up to goal may be written but not flushed yet (synchronous_commit off, or records outside
	// transactions), and walsenders send only flushed WAL: an idle WAL writer flushes it within seconds. A
	// commit with synchronous_commit on flushes it now.
	if _, err := conn.Exec(ctx, "BEGIN; SET LOCAL synchronous_commit = on; SELECT pg_current_xact_id(); COMMIT"); err != nil {
		return err
	}
	deadline := time.Now().Add(drainWait)
	lastLook := time.Now()
	for {
		if subRec != nil && time.Since(lastLook) > 500*time.Millisecond {
			lastLook = time.Now()
			sc, err := s.host.AdminConn(ctx, subRec, "postgres")
			if err != nil {
				return fmt.Errorf("the new server stopped answering in the write pause: %w", err)
			}
			sc.Close(context.WithoutCancel(ctx))
		}
		var behind int64
		var slots int
		err := conn.QueryRow(ctx, `SELECT count(*), coalesce(max(coalesce(pg_wal_lsn_diff($1::pg_lsn, confirmed_flush_lsn), 1)), 0)::bigint
			FROM pg_replication_slots WHERE slot_name LIKE $2`, goal, prefix+`\_%`).Scan(&slots, &behind)
		if err != nil {
			return err
		}
		if slots == 0 {
			return fmt.Errorf("no replication slot %s_* on the server: the subscriptions are gone", prefix)
		}
		if behind <= 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the subscriber did not reach %s within %s (%d bytes short)", goal, drainWait, behind)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// copySequences sets every sequence of the databases on to's server to its value on from's (logical
// replication does not carry sequences), writes paused on from.
func (s *Service) copySequences(ctx context.Context, from, to *store.Instance, dbs []string) (int, error) {
	type seq struct {
		Schema, Name string
		Last         int64
	}
	n := 0
	for _, db := range dbs {
		fc, err := s.host.AdminConn(ctx, from, db)
		if err != nil {
			return n, err
		}
		rows, err := fc.Query(ctx, `SELECT schemaname::text, sequencename::text, last_value FROM pg_sequences
			WHERE last_value IS NOT NULL AND schemaname NOT IN ('pg_catalog', 'information_schema')`)
		var seqs []seq
		if err == nil {
			seqs, err = pgx.CollectRows(rows, pgx.RowToStructByPos[seq])
		}
		fc.Close(context.WithoutCancel(ctx))
		if err != nil {
			return n, err
		}
		if len(seqs) == 0 {
			continue
		}
		tc, err := s.host.AdminConn(ctx, to, db)
		if err != nil {
			return n, err
		}
		for _, q := range seqs {
			name := pgx.Identifier{q.Schema, q.Name}.Sanitize()
			if _, err = tc.Exec(ctx, "SELECT setval($1::regclass, $2, true)", name, q.Last); err != nil {
				err = fmt.Errorf("set sequence %s.%s: %w", db, name, err)
				break
			}
			n++
		}
		tc.Close(context.WithoutCancel(ctx))
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// fence refuses every login but the admin's on rec's server (or lets them in again) and, fencing, ends the
// client sessions: no client writes there from the moment it returns.
func (s *Service) fence(ctx context.Context, rec *store.Instance, fenced bool) error {
	if err := s.eng.Instance(rec).Fence(fenced); err != nil {
		return err
	}
	conn, err := s.host.AdminConn(ctx, rec, "postgres")
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return postgres.ApplyFence(ctx, conn, fenced)
}

// cutover moves the project to the new server (next, on its own port until now): writes paused (the
// pooler stopped, the old server fenced and its client sessions ended), the last changes drained,
// sequences advanced, the forward subscriptions dropped; then the servers swap ports (the new one on the
// project's, the old one on next's), the old server subscribes to the new one for a rollback, and the
// records, the pooler and the new server's doors open. A failure before the swap resumes the old server.
func (s *Service) cutover(ctx context.Context, run *scheduler.Run, prj *store.Project, inst, next *store.Instance, dbs []string) (map[string]any, error) {
	progress(run, "cutover", nil)
	// The new cluster archives its WAL into an archive of its own since its creation (prepareTarget).
	walArchive := next.WALArchive
	fromTimeline, err := s.timeline(ctx, inst)
	if err != nil {
		return nil, fmt.Errorf("read the old server's timeline: %w", err)
	}
	// A checkpoint of each server now makes their shutdown checkpoints, inside the pause, short.
	for _, rec := range []*store.Instance{inst, next} {
		if conn, err := s.host.AdminConn(ctx, rec, "postgres"); err == nil {
			_, _ = conn.Exec(ctx, "CHECKPOINT")
			conn.Close(context.WithoutCancel(ctx))
		}
	}
	paused := time.Now()
	steps := instances.NewTimer()
	s.host.SetRuntime(prj.ID, api.RuntimeRestarting)
	s.eng.Unwatch(inst)
	bg := context.WithoutCancel(ctx)
	resume := func(cause error) error {
		err := s.fence(bg, inst, false)
		err = errors.Join(err, s.eng.Watch(inst, prj))
		s.host.SetRuntime(prj.ID, api.RuntimeActive)
		if err != nil {
			return fmt.Errorf("%w (and resuming the old server: %v)", cause, err)
		}
		return cause
	}
	if err := s.eng.Pooler(inst, prj).Stop(ctx, nil, daemon.StopFast); err != nil {
		return nil, resume(fmt.Errorf("stop the pooler: %w", err))
	}
	steps.Done("pooler_stop")
	if err := s.fence(ctx, inst, true); err != nil {
		return nil, resume(fmt.Errorf("pause writes: %w", err))
	}
	steps.Done("fence")
	s.step(ctx, run, "upgrade-paused")
	if err := s.drain(ctx, inst, next, forwardName); err != nil {
		return nil, resume(err)
	}
	steps.Done("drain")
	nseq, err := s.copySequences(ctx, inst, next, dbs)
	if err != nil {
		return nil, resume(fmt.Errorf("set the sequences on the new server: %w", err))
	}
	steps.Done("sequences")
	if err := s.unsubscribe(ctx, inst, next, dbs, forwardName); err != nil {
		return nil, resume(fmt.Errorf("drop the forward replication: %w", err))
	}
	steps.Done("unsubscribe")
	// The rollback's slots, made before any client reaches the new server: they keep every write from its
	// first for the old server, which subscribes once the project is open again.
	slots := map[string]string{}
	for _, db := range dbs {
		slot, err := s.publish(ctx, next, db, rollbackName, true)
		if err != nil {
			s.unsubscribe(bg, next, nil, dbs, rollbackName)
			return nil, resume(fmt.Errorf("prepare the rollback's replication: %w", err))
		}
		slots[db] = slot
	}
	steps.Done("rollback_slots")
	// The swap: the old server moves to the new one's port, the new one to the project's. Both stay fenced.
	oldPG, nextPG := s.eng.Instance(inst), s.eng.Instance(next)
	away := at(inst, next.Port)
	swapped := *next
	swapped.Port = inst.Port
	newPG := s.eng.Instance(&swapped)
	undo := func(cause error) error {
		nextPG.Stop(bg, run.Exec, daemon.StopFast)
		newPG.Stop(bg, run.Exec, daemon.StopFast)
		s.eng.Instance(away).Stop(bg, run.Exec, daemon.StopFast)
		if err := oldPG.Start(bg, run.Exec); err != nil {
			return fmt.Errorf("%w (and starting the old server again: %v)", cause, err)
		}
		return resume(cause)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- oldPG.Stop(ctx, run.Exec, daemon.StopFast) }()
	err = nextPG.Stop(ctx, run.Exec, daemon.StopFast)
	if err = errors.Join(err, <-stopped); err != nil {
		return nil, undo(err)
	}
	steps.Done("swap_stop")
	if err := newPG.Start(ctx, run.Exec); err != nil {
		return nil, undo(err)
	}
	steps.Done("swap_start")
	var rec *store.Instance
	err = s.db.Update(func(tx *store.Tx) error {
		var err error
		if rec, err = store.Instances.Get(tx, inst.ID); err != nil {
			return err
		}
		rec.PreviousDir, rec.PreviousMajor, rec.PreviousBinDir, rec.PreviousPort = rec.Dir, rec.Major, rec.BinDir, away.Port
		rec.Dir, rec.Major, rec.BinDir, rec.UpgradeMethod, rec.UpdatedAt = next.Dir, next.Major, next.BinDir, MethodLogical, s.now()
		rec.PreviousWALArchive, rec.WALArchive, rec.WALArchiveOff = rec.WALArchive, walArchive, false
		return store.Instances.Put(tx, rec)
	})
	if err != nil {
		return nil, fmt.Errorf("%w (fenced) but its record could not be written: %w", errSwapped, err)
	}
	s.step(ctx, run, "upgrade-swapped")
	// The switch's moment: the new server holds every write (drained), and no client reaches either server
	// until openOn lifts its fence.
	switchAt := time.Now()
	if err := s.openOn(ctx, prj, rec); err != nil {
		return nil, fmt.Errorf("%w but could not be opened to clients: %w", errSwapped, err)
	}
	steps.Done("open")
	pause := time.Since(paused)
	// The old server, on the new one's former port, follows it for a rollback.
	progress(run, "reverse replication", nil)
	var warnings []string
	if err := s.eng.Instance(away).Start(ctx, run.Exec); err != nil {
		warnings = append(warnings, fmt.Sprintf("start the old server for the rollback's replication: %v (a rollback starts it and catches up from the slots)", err))
	} else {
		for _, db := range dbs {
			if err := s.subscribe(ctx, &swapped, away, db, slots[db], rollbackName, false); err != nil {
				warnings = append(warnings, fmt.Sprintf("the rollback's replication of %s: %v (a rollback would lose the writes made on the new server)", db, err))
			}
		}
	}
	steps.Done("rollback_subscribe")
	// The project's timeline log: a point in time before the switch (the end of the pause, just before the
	// new server opened) is read on the old cluster (which, writes paused, took every client write until
	// then), after it on the new one, whose base backup of before the cutover and archive since its
	// creation restore it.
	sw := ClusterSwitch{JobID: run.Job.ID, FromArchive: inst.WALArchive, ToArchive: walArchive, FromTimeline: fromTimeline, At: switchAt.UTC()}
	if sw.ToTimeline, err = s.timeline(ctx, rec); err == nil {
		err = s.host.SwitchedCluster(ctx, prj, sw, false)
	}
	if err != nil {
		warnings = append(warnings, fmt.Sprintf("record the move to the new cluster for point-in-time restores: %v (a restore to a time before the upgrade may start from the wrong cluster)", err))
	}
	version, _ := s.serverVersion(ctx, rec)
	s.host.UpdateProject(prj.ID, func(p *store.Project) error {
		p.PostgresVersion, p.RuntimeStatus = version, api.RuntimeActive
		return nil
	})
	s.host.SetRuntime(prj.ID, api.RuntimeActive)
	if warnings == nil {
		warnings = []string{}
	}
	return map[string]any{"postgres_version": version, "previous_dir_kept": inst.Dir, "previous_port": away.Port,
		"sequences_advanced": nseq, "write_pause_ms": pause.Milliseconds(), "cutover_steps_ms": steps.MS,
		"cutover_warnings": warnings}, nil
}

// timeline is the WAL timeline rec's server writes on.
func (s *Service) timeline(ctx context.Context, rec *store.Instance) (int, error) {
	conn, err := s.host.AdminConn(ctx, rec, "postgres")
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tl, _, err := instances.CurrentTimeline(ctx, conn)
	return tl, err
}

// archiveInto writes, into the settings of rec's cluster (stopped or to be restarted), the archive_command
// (and archive_timeout) of the project's WAL archive walArchive: it takes effect at its next start.
func (s *Service) archiveInto(prj *store.Project, rec *store.Instance, walArchive string) error {
	c := *rec
	c.WALArchive, c.WALArchiveOff = walArchive, false
	want, err := s.host.Settings(prj, &c)
	if err != nil {
		return err
	}
	pgi := s.eng.Instance(rec)
	set, err := pgi.ReadSettings()
	if err != nil {
		return err
	}
	set.ArchiveCommand, set.ArchiveTimeout = want.ArchiveCommand, want.ArchiveTimeout
	_, err = pgi.WriteSettings(set)
	return err
}

// openOn makes rec's server the project's: the pooler's user list written from it, the pooler started,
// server and pooler watched, its logins let in.
func (s *Service) openOn(ctx context.Context, prj *store.Project, rec *store.Instance) error {
	conn, err := s.host.AdminConn(ctx, rec, prj.DatabaseName)
	if err != nil {
		return err
	}
	err = s.eng.SyncPoolerUsers(ctx, conn, rec, prj)
	conn.Close(context.WithoutCancel(ctx))
	if err != nil {
		return err
	}
	// Started here, not left to the supervisor's next look after Watch: the job's completion says the
	// pooled URL answers, and a client that connects at once must not be refused.
	if err := s.eng.Pooler(rec, prj).Start(ctx, nil); err != nil {
		return err
	}
	if err := s.eng.Watch(rec, prj); err != nil {
		return err
	}
	return s.fence(ctx, rec, false)
}

// previous is the record of the old server of a pending logical upgrade, on its port.
func previous(inst *store.Instance) *store.Instance {
	p := at(inst, inst.PreviousPort)
	p.Dir, p.Major, p.BinDir, p.WALArchive = inst.PreviousDir, inst.PreviousMajor, inst.PreviousBinDir, inst.PreviousWALArchive
	p.PreviousDir, p.PreviousMajor, p.PreviousBinDir, p.PreviousPort, p.UpgradeMethod, p.WALArchiveOff = "", 0, "", 0, "", false
	p.PreviousWALArchive = ""
	return p
}

// confirmLogical stops and removes the old server, and drops the rollback's slots and publications on
// the new one.
func (s *Service) confirmLogical(ctx context.Context, run *scheduler.Run, inst *store.Instance) (any, error) {
	prev := previous(inst)
	prevPG := s.eng.Instance(prev)
	// The old cluster's archive is complete up to now before it goes (a commit timed now, its segment
	// archived): a point-in-time restore to any time before the cutover replays it to its target.
	var warnings []string
	if pw, err := s.box.Open(inst.AdminPassword); err != nil {
		return nil, err
	} else if _, running, _ := prevPG.Status(); running {
		archived := func(ctx context.Context, seg string) (bool, error) {
			return s.host.WALArchived(ctx, inst.ProjectID, prev.WALArchive, seg)
		}
		if _, _, err := instances.ArchiveNow(ctx, prev, string(pw), archived); err != nil {
			warnings = append(warnings, fmt.Sprintf("the old server's last WAL was not archived (%v): a restore to a time just before the upgrade may not reach it", err))
		}
	} else {
		warnings = append(warnings, "the old server was not running: its last WAL segment may not be archived, and a restore to a time just before the upgrade may not reach it")
	}
	if err := prevPG.Stop(ctx, run.Exec, daemon.StopFast); err != nil {
		return nil, err
	}
	dbs, err := s.databasesOf(ctx, inst)
	if err != nil {
		return nil, err
	}
	if err := s.unsubscribe(ctx, inst, nil, dbs, rollbackName); err != nil {
		return nil, err
	}
	if err := prevPG.Remove(ctx); err != nil {
		return nil, err
	}
	err = s.db.Update(func(tx *store.Tx) error {
		rec, err := store.Instances.Get(tx, inst.ID)
		if err != nil {
			return err
		}
		rec.PreviousDir, rec.PreviousMajor, rec.PreviousBinDir, rec.PreviousPort, rec.UpgradeMethod, rec.UpdatedAt = "", 0, "", 0, "", s.now()
		rec.PreviousWALArchive = ""
		return store.Instances.Put(tx, rec)
	})
	if warnings == nil {
		warnings = []string{}
	}
	return map[string]any{"removed": prev.Dir, "method": MethodLogical, "warnings": warnings}, err
}

// rollbackLogical returns the project to its old server with what was written on the new one since the
// cutover (the rollback's subscriptions carried it): writes paused on the new server, drained, sequences
// copied back, then the old server takes the project's port again and the new one is removed.
func (s *Service) rollbackLogical(ctx context.Context, run *scheduler.Run, prj *store.Project, inst *store.Instance) (any, error) {
	paused := time.Now()
	steps := instances.NewTimer()
	prev := previous(inst)
	prevPG := s.eng.Instance(prev)
	if err := prevPG.Start(ctx, run.Exec); err != nil { // stopped by a restart of the appliance meanwhile
		return nil, fmt.Errorf("start the old server: %w", err)
	}
	// The old server's databases: those the rollback's replication carries (one made since the cutover is
	// not, as the preflight warned).
	dbs, err := s.databasesOf(ctx, prev)
	if err != nil {
		return nil, err
	}
	// The old server catches up before the pause, not in it: its subscriptions' workers start at most once
	// per wal_retrieve_retry_interval (5 s) after the cutover created them, so a database's worker may
	// not have started yet.
	if _, err := s.waitSynchronized(ctx, run, inst, prev, dbs, rollbackName); err != nil {
		return nil, err
	}
	steps.Done("catch_up")
	s.host.SetRuntime(prj.ID, api.RuntimeRestarting)
	s.eng.Unwatch(inst)
	bg := context.WithoutCancel(ctx)
	resume := func(cause error) error {
		err := errors.Join(s.fence(bg, inst, false), s.eng.Watch(inst, prj))
		s.host.SetRuntime(prj.ID, api.RuntimeActive)
		if err != nil {
			return fmt.Errorf("%w (and resuming the new server: %v)", cause, err)
		}
		return cause
	}
	for _, rec := range []*store.Instance{inst, prev} {
		if conn, err := s.host.AdminConn(ctx, rec, "postgres"); err == nil {
			_, _ = conn.Exec(ctx, "CHECKPOINT") // keeps the shutdown checkpoints in the pause short
			conn.Close(context.WithoutCancel(ctx))
		}
	}
	fromTimeline, err := s.timeline(ctx, inst)
	if err != nil {
		return nil, resume(fmt.Errorf("read the new server's timeline: %w", err))
	}
	toTimeline, err := s.timeline(ctx, prev)
	if err != nil {
		return nil, resume(fmt.Errorf("read the old server's timeline: %w", err))
	}
	paused = time.Now()
	if err := s.eng.Pooler(inst, prj).Stop(ctx, nil, daemon.StopFast); err != nil {
		return nil, resume(err)
	}
	steps.Done("start_old")
	if err := s.fence(ctx, inst, true); err != nil {
		return nil, resume(err)
	}
	steps.Done("fence")
	if err := s.drain(ctx, inst, nil, rollbackName); err != nil {
		return nil, resume(fmt.Errorf("the old server did not receive the writes made since the cutover: %w", err))
	}
	steps.Done("drain")
	nseq, err := s.copySequences(ctx, inst, prev, dbs)
	if err != nil {
		return nil, resume(err)
	}
	steps.Done("sequences")
	if err := s.unsubscribe(ctx, inst, prev, dbs, rollbackName); err != nil {
		return nil, resume(err)
	}
	steps.Done("unsubscribe")
	cur := s.eng.Instance(inst)
	back := previous(inst)
	back.Port = inst.Port
	backPG := s.eng.Instance(back)
	stopped := make(chan error, 1)
	go func() { stopped <- prevPG.Stop(ctx, run.Exec, daemon.StopFast) }()
	if err := errors.Join(cur.Stop(ctx, run.Exec, daemon.StopFast), <-stopped); err != nil {
		cur.Start(bg, run.Exec)
		return nil, resume(err)
	}
	steps.Done("swap_stop")
	if err := backPG.Start(ctx, run.Exec); err != nil {
		prevPG.Start(bg, run.Exec)
		cur.Start(bg, run.Exec)
		return nil, resume(err)
	}
	steps.Done("swap_start")
	back.UpdatedAt = s.now()
	if err := s.db.Update(func(tx *store.Tx) error { return store.Instances.Put(tx, back) }); err != nil {
		return nil, err
	}
	if err := s.openOn(ctx, prj, back); err != nil {
		return nil, fmt.Errorf("the project runs on its old server again but could not be opened to clients: %w", err)
	}
	steps.Done("open")
	pause := time.Since(paused)
	warnings := []string{}
	sw := ClusterSwitch{JobID: run.Job.ID, FromArchive: inst.WALArchive, ToArchive: back.WALArchive, FromTimeline: fromTimeline,
		ToTimeline: toTimeline, At: paused.UTC()}
	if err := s.host.SwitchedCluster(ctx, prj, sw, false); err != nil {
		warnings = append(warnings, fmt.Sprintf("record the move back to the old cluster for point-in-time restores: %v", err))
	}
	if err := cur.Remove(ctx); err != nil {
		return nil, err
	}
	version, _ := s.serverVersion(ctx, back)
	s.host.UpdateProject(prj.ID, func(p *store.Project) error {
		p.PostgresVersion, p.RuntimeStatus = version, api.RuntimeActive
		return nil
	})
	s.host.SetRuntime(prj.ID, api.RuntimeActive)
	return map[string]any{"rolled_back_to": back.Major, "postgres_version": version, "method": MethodLogical,
		"sequences_copied": nseq, "write_pause_ms": pause.Milliseconds(), "steps_ms": steps.MS, "databases": strings.Join(dbs, ","),
		"warnings": warnings}, nil
}

// finishCutover finishes the cutover of this job when an earlier attempt swapped the servers and wrote the
// record (the project's record names the new server) but the appliance stopped before the rest: the new
// server opened to clients, the old one started on its port and subscribed to the rollback's slots (those
// it lacks), the move recorded in the timeline log, the project's version. Every step is idempotent.
func (s *Service) finishCutover(ctx context.Context, run *scheduler.Run, prj *store.Project, inst *store.Instance) (any, error) {
	progress(run, "finish the cutover", nil)
	opened := time.Now() // before the fence is lifted: see cutover's switchAt
	if err := waitUntil(ctx, time.Minute, func() error { return s.openOn(ctx, prj, inst) }); err != nil {
		return nil, scheduler.Transient(fmt.Errorf("%w but could not be opened to clients: %w", errSwapped, err))
	}
	prev := previous(inst)
	var warnings []string
	fromTimeline := 0
	if err := s.eng.Instance(prev).Start(ctx, run.Exec); err != nil {
		warnings = append(warnings, fmt.Sprintf("start the old server for the rollback's replication: %v (a rollback starts it and catches up from the slots)", err))
	} else if err := s.resubscribe(ctx, inst, prev); err != nil {
		warnings = append(warnings, fmt.Sprintf("the rollback's replication: %v (a rollback would lose the writes made on the new server)", err))
	} else if fromTimeline, err = s.timeline(ctx, prev); err != nil {
		warnings = append(warnings, fmt.Sprintf("read the old server's timeline: %v", err))
	}
	sw := ClusterSwitch{JobID: run.Job.ID, FromArchive: prev.WALArchive, ToArchive: inst.WALArchive, FromTimeline: fromTimeline, At: opened.UTC()}
	var err error
	if sw.ToTimeline, err = s.timeline(ctx, inst); err == nil {
		err = s.host.SwitchedCluster(ctx, prj, sw, false)
	}
	if err != nil {
		warnings = append(warnings, fmt.Sprintf("record the move to the new cluster for point-in-time restores: %v", err))
	}
	version, _ := s.serverVersion(ctx, inst)
	s.host.UpdateProject(prj.ID, func(p *store.Project) error {
		p.PostgresVersion, p.RuntimeStatus = version, api.RuntimeActive
		return nil
	})
	s.host.SetRuntime(prj.ID, api.RuntimeActive)
	if warnings == nil {
		warnings = []string{}
	}
	return map[string]any{"postgres_version": version, "from_major": prev.Major, "to_major": inst.Major, "method": MethodLogical,
		"previous_dir_kept": prev.Dir, "previous_port": prev.Port, "finished_after_restart": true, "cutover_warnings": warnings}, nil
}

// resubscribe subscribes the old server (prev) to the rollback's slot of each of its databases on the new
// one (inst) that it does not follow yet.
func (s *Service) resubscribe(ctx context.Context, inst, prev *store.Instance) error {
	conn, err := s.host.AdminConn(ctx, prev, "postgres")
	if err != nil {
		return err
	}
	dbs, err := databases(ctx, conn)
	conn.Close(context.WithoutCancel(ctx))
	if err != nil {
		return err
	}
	for _, db := range dbs {
		sc, err := s.host.AdminConn(ctx, prev, db)
		if err != nil {
			return err
		}
		var has bool
		err = sc.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_subscription WHERE subdbid = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND subname LIKE $1)`, rollbackName+`\_%`).Scan(&has)
		sc.Close(context.WithoutCancel(ctx))
		if err != nil {
			return err
		}
		if has {
			continue
		}
		pc, err := s.host.AdminConn(ctx, inst, db)
		if err != nil {
			return err
		}
		slot, err := slotName(ctx, pc, rollbackName)
		pc.Close(context.WithoutCancel(ctx))
		if err != nil {
			return err
		}
		if err := s.subscribe(ctx, inst, prev, db, slot, rollbackName, false); err != nil {
			return fmt.Errorf("%s: %w", db, err)
		}
	}
	return nil
}
