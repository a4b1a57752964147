package upgrades

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// target starts most upgrade jobs: the data plane, the job's payload, and the project with its instance,
// which must be active (Host.ActiveTarget).
func (s *Service) target(run *scheduler.Run, payload any) (*Plane, *store.Project, *store.Instance, error) {
	dp, err := s.dataPlane()
	if err != nil {
		return nil, nil, nil, err
	}
	prj, inst, err := s.host.ActiveTarget(run, payload)
	if err != nil {
		return nil, nil, nil, err
	}
	return dp, prj, inst, nil
}

// targetBinaries finds the installation of a major (Debian's under Config.PostgresRoot, a distribution
// unpacked under Config.DistRoot), or says clearly what is missing, and the method of the upgrade to it:
// pg_upgrade when the installation has it, logical replication otherwise.
func (s *Service) targetBinaries(major int) (postgres.Binaries, string, error) {
	var have []string
	for _, b := range postgres.Majors(s.cfg.PostgresRoot, s.cfg.DistRoot) {
		if b.Major == major {
			return b, methodTo(b), nil
		}
		have = append(have, strconv.Itoa(b.Major))
	}
	where := s.cfg.PostgresRoot
	if s.cfg.DistRoot != "" {
		where += " nor under " + s.cfg.DistRoot
	}
	return postgres.Binaries{}, "", fmt.Errorf("PostgreSQL %d is not installed (not in %s: install postgresql-%d, or give up --pg-dist %d=npm); installed majors: %s",
		major, where, major, major, strings.Join(have, ", "))
}

// clientSessions counts the sessions of customers (not the appliance's own).
func (s *Service) clientSessions(ctx context.Context, inst *store.Instance) (int, error) {
	conn, err := s.host.AdminConn(ctx, inst, "postgres")
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var n int
	err = conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE backend_type = 'client backend' AND usename IS DISTINCT FROM $1 AND pid <> pg_backend_pid()`, postgres.AdminRole).Scan(&n)
	return n, err
}

func (s *Service) serverVersion(ctx context.Context, inst *store.Instance) (string, error) {
	conn, err := s.host.AdminConn(ctx, inst, "postgres")
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var v string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&v); err != nil {
		return "", err
	}
	v, _, _ = strings.Cut(v, " ")
	return v, nil
}

// minorJob restarts the instance so it runs the installed binaries of its major (Debian replaces
// them in place on a minor update). Refused while customer sessions are active unless forced.
func (s *Service) minorJob(ctx context.Context, run *scheduler.Run) (any, error) {
	var in minorPayload
	_, prj, inst, err := s.target(run, &in)
	if err != nil {
		return nil, err
	}
	before, err := s.serverVersion(ctx, inst)
	if err != nil {
		return nil, scheduler.Transient(err)
	}
	n, err := s.clientSessions(ctx, inst)
	if err != nil {
		return nil, scheduler.Transient(err)
	}
	if n > 0 && !in.Force {
		return nil, fmt.Errorf("%d client sessions are active: the restart would end them; retry with force=true (administrators only)", n)
	}
	if err := s.restart(ctx, run, prj, inst); err != nil {
		return nil, err
	}
	after, err := s.serverVersion(ctx, inst)
	if err != nil {
		return nil, scheduler.Transient(err)
	}
	if err := s.host.UpdateProject(prj.ID, func(p *store.Project) error { p.PostgresVersion = after; return nil }); err != nil {
		return nil, err
	}
	return map[string]any{"version_before": before, "version_after": after, "sessions_ended": n}, nil
}

// restart restarts the instance and its pooler through the engine, the project's runtime status
// restarting meanwhile: a minor upgrade's restart and a restart's.
func (s *Service) restart(ctx context.Context, run *scheduler.Run, prj *store.Project, inst *store.Instance) error {
	err := s.eng.Restart(ctx, run.Exec, inst, prj, func(restarting bool) {
		if restarting {
			s.host.SetRuntime(prj.ID, api.RuntimeRestarting)
		} else {
			s.host.SetRuntime(prj.ID, api.RuntimeActive)
		}
	})
	if err != nil {
		return scheduler.Transient(err)
	}
	return nil
}

// postmasterStart is when the instance's server last started (pg_postmaster_start_time()).
func (s *Service) postmasterStart(ctx context.Context, inst *store.Instance) (time.Time, error) {
	conn, err := s.host.AdminConn(ctx, inst, "postgres")
	if err != nil {
		return time.Time{}, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var t time.Time
	err = conn.QueryRow(ctx, "SELECT pg_postmaster_start_time()").Scan(&t)
	return t.UTC(), err
}

// restartJob restarts the project's server and its pooler: the sessions open end (a restart is asked for
// by someone who may end them: see Restart).
func (s *Service) restartJob(ctx context.Context, run *scheduler.Run) (any, error) {
	_, prj, inst, err := s.target(run, nil)
	if err != nil {
		return nil, err
	}
	before, err := s.postmasterStart(ctx, inst)
	if err != nil {
		return nil, scheduler.Transient(err)
	}
	n, err := s.clientSessions(ctx, inst)
	if err != nil {
		return nil, scheduler.Transient(err)
	}
	if err := s.restart(ctx, run, prj, inst); err != nil {
		return nil, err
	}
	after, err := s.postmasterStart(ctx, inst)
	if err != nil {
		return nil, scheduler.Transient(err)
	}
	return map[string]any{"started_before": before, "started_at": after, "sessions_ended": n}, nil
}

// preflightJob runs pg_upgrade --check against the target major's binaries in a scratch cluster.
func (s *Service) preflightJob(ctx context.Context, run *scheduler.Run) (any, error) {
	var in majorPayload
	dp, prj, inst, err := s.target(run, &in)
	if err != nil {
		return nil, err
	}
	target, method, err := s.targetBinaries(in.TargetMajor)
	if err != nil {
		return nil, err
	}
	if method == MethodLogical {
		plan, err := s.checkLogical(ctx, prj, inst, target)
		if err != nil {
			return nil, err
		}
		if err := blockersErr(plan); err != nil {
			return nil, err
		}
		// A trial: the roles and the schema restored into a scratch cluster of the target, what only the new
		// major refuses (a view of a catalog column it moved) named before the upgrade.
		scratch, _, err := s.prepareTarget(ctx, run, dp, prj, inst, target, inst.Dir+"-preflight", "", plan.Databases)
		if err != nil {
			return nil, fmt.Errorf("the schema does not restore into PostgreSQL %d: %w", target.Major, err)
		}
		scratch.Remove(context.WithoutCancel(ctx))
		return map[string]any{"ok": true, "from_major": inst.Major, "target_major": in.TargetMajor, "method": method,
			"target_bin_dir": target.Dir, "databases": plan.Databases, "tables": plan.Tables, "warnings": plan.Warnings}, nil
	}
	return s.pgUpgradeCheck(ctx, run, dp, prj, inst, target)
}

// newCluster initialises an empty cluster of the target binaries with the project's settings, stopped.
func (s *Service) newCluster(ctx context.Context, run *scheduler.Run, prj *store.Project, inst *store.Instance, target postgres.Binaries, dir string) (*postgres.Instance, error) {
	if dir == inst.Dir || dir == inst.PreviousDir { // it removes what dir holds first: never the project's data
		return nil, fmt.Errorf("the new cluster's directory %s is the project's", dir)
	}
	rec := *inst
	rec.Dir, rec.Major, rec.BinDir = dir, target.Major, target.Dir
	pgi := s.eng.Instance(&rec)
	if err := pgi.Remove(ctx); err != nil {
		return nil, err
	}
	opts, err := s.host.InitOptions(prj, &rec)
	if err != nil {
		return nil, err
	}
	if err := pgi.Init(ctx, run.Exec, opts); err != nil {
		return nil, err
	}
	return pgi, nil
}

// majorJob stops the instance, upgrades its data into a new directory with pg_upgrade (copy mode:
// the old directory stays intact for rollback) and starts the new one on the same port.
func (s *Service) majorJob(ctx context.Context, run *scheduler.Run) (any, error) {
	var in majorPayload
	dp, prj, inst, err := s.target(run, &in)
	if err != nil {
		return nil, err
	}
	target, method, err := s.targetBinaries(in.TargetMajor)
	if err != nil {
		return nil, err
	}
	if inst.Major == in.TargetMajor && inst.PreviousDir != "" {
		if inst.UpgradeMethod == MethodLogical && inst.WALArchive == fmt.Sprintf("pg%d-%s", inst.Major, run.Job.ID) {
			return s.finishCutover(ctx, run, prj, inst) // this job's cutover, cut short by a stop of the appliance
		}
		if inst.UpgradeMethod == MethodPgUpgrade { // a retry of an upgrade cut short after its record: open it
			if err := s.openOn(ctx, prj, inst); err != nil {
				return nil, scheduler.Transient(fmt.Errorf("open the upgraded server: %w", err))
			}
		}
		return map[string]any{"skipped": "already upgraded; confirm or roll back"}, nil
	}
	if method == MethodLogical {
		return s.logicalMajor(ctx, run, dp, prj, inst, target)
	}
	return s.pgUpgradeMajor(ctx, run, dp, prj, inst, target)
}

// confirmJob drops the pre-upgrade data directory.
func (s *Service) confirmJob(ctx context.Context, run *scheduler.Run) (any, error) {
	_, err := s.dataPlane()
	if err != nil {
		return nil, err
	}
	_, inst, err := s.host.LoadProject(run.Job.ProjectID)
	if err != nil || inst.PreviousDir == "" {
		return map[string]any{"skipped": "nothing to confirm"}, err
	}
	if inst.UpgradeMethod == MethodLogical {
		return s.confirmLogical(ctx, run, inst)
	}
	prev := *inst
	prev.Dir, prev.Major, prev.BinDir = inst.PreviousDir, inst.PreviousMajor, inst.PreviousBinDir
	if err := s.eng.Instance(&prev).Remove(ctx); err != nil {
		return nil, err
	}
	err = s.db.Update(func(tx *store.Tx) error {
		rec, err := store.Instances.Get(tx, inst.ID)
		if err != nil {
			return err
		}
		rec.PreviousDir, rec.PreviousMajor, rec.PreviousBinDir, rec.UpgradeMethod, rec.UpdatedAt = "", 0, "", "", s.now()
		rec.PreviousWALArchive, rec.PreviousPort = "", 0
		return store.Instances.Put(tx, rec)
	})
	return map[string]any{"removed": prev.Dir, "method": MethodPgUpgrade}, err
}

// rollbackJob stops the upgraded server and starts the old data directory on its old binaries.
func (s *Service) rollbackJob(ctx context.Context, run *scheduler.Run) (any, error) {
	_, err := s.dataPlane()
	if err != nil {
		return nil, err
	}
	prj, inst, err := s.host.LoadProject(run.Job.ProjectID)
	if err != nil || inst.PreviousDir == "" {
		return map[string]any{"skipped": "nothing to roll back"}, err
	}
	if _, err := os.Stat(inst.PreviousDir); err != nil {
		return nil, fmt.Errorf("the pre-upgrade directory is gone: %w", err)
	}
	if inst.UpgradeMethod == MethodLogical {
		return s.rollbackLogical(ctx, run, prj, inst)
	}
	return s.pgUpgradeRollback(ctx, run, prj, inst)
}
