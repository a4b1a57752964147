package appliance

import (
	"context"
	"time"

	"github.com/theappliance/appliance/scheduler"
)

// periodicTask is one of the service's periodic tasks: run on a cron spec of the runner, once per cluster
// by the node that leads (scheduler.Every), or, for the work on a node's own processes and files
// (nodeTasks), by every node (scheduler.EveryNode). On a single node both run as before.
type periodicTask struct {
	spec, name string
	run        func(ctx context.Context)
}

// nodeTasks are the periodic tasks that look at a node's own processes and files: the sampler (the
// servers' processes' stat files), the servers' log files, the spare clusters, the key-value stores' dump
// files and the idle servers (stopped where they run). In a cluster each node's run looks only at its own
// projects' instances and its own spares (store.Local, store.LocalInstance).
var nodeTasks = map[string]bool{"observability-sampler": true, "server-log-housekeeping": true, "spare-clusters": true,
	"kv-snapshots": true, "suspend-idle": true}

// RegisterPeriodic gives the runner the service's periodic work (sweeps, scheduled backups, sampling,
// housekeeping, the spare clusters' refill), as RegisterJobs gives it the job handlers.
func (s *Service) RegisterPeriodic(r *scheduler.Runner) error {
	for _, t := range s.periodic() {
		every := r.Every
		if nodeTasks[t.name] {
			every = r.EveryNode
		}
		if err := every(t.spec, t.name, t.run); err != nil {
			return err
		}
	}
	return nil
}

// periodic lists the periodic tasks in the order they are registered.
func (s *Service) periodic() []periodicTask {
	log := s.log
	tasks := []periodicTask{
		{"@every 1m", "expiry-sweep", func(ctx context.Context) {
			if res, err := s.Sweep(ctx); err != nil {
				log.Error("expiry sweep", "err", err)
			} else if res != (SweepResult{}) {
				log.Info("expiry sweep", "result", res)
			}
			if n, err := s.exports.Sweep(ctx); err != nil {
				log.Error("export expiry sweep", "err", err)
			} else if n > 0 {
				log.Info("export expiry sweep", "expired", n)
			}
			if n, err := s.previews.Sweep(ctx); err != nil {
				log.Error("preview expiry", "err", err)
			} else if n > 0 {
				log.Info("previews expired", "deleted", n)
			}
			if n, err := s.previews.SweepEphemeral(ctx); err != nil {
				log.Error("ephemeral database expiry", "err", err)
			} else if n > 0 {
				log.Info("ephemeral databases expired", "deleted", n)
			}
			if n, err := s.events.Sweep(ctx); err != nil {
				log.Error("event log sweep", "err", err)
			} else if n > 0 {
				log.Info("event log sweep", "deleted", n)
			}
		}},
		{"@every 1m", "scheduled-backups", func(ctx context.Context) {
			if res, err := s.backups.RunScheduled(ctx, time.Now()); err != nil {
				log.Error("scheduled backups", "err", err)
			} else if res != (ScheduledRunResult{}) {
				log.Info("scheduled backups", "result", res)
			}
		}},
		{"@every 1h", "storage-history", func(ctx context.Context) {
			if _, err := s.SampleStorage(ctx); err != nil {
				log.Error("storage sampling", "err", err)
			}
		}},
		{"@every 1m", "observability-sampler", func(ctx context.Context) {
			if _, err := s.observe.Sample(ctx); err != nil {
				log.Error("observability sampling", "err", err)
			}
		}},
		{"@every 1h", "observability-housekeeping", func(ctx context.Context) {
			if n, err := s.observe.Prune(ctx); err != nil {
				log.Error("observability pruning", "err", err)
			} else if n > 0 {
				log.Info("observability pruning", "deleted", n)
			}
		}},
		{"@every 1h", "server-log-housekeeping", func(ctx context.Context) {
			if c, d, err := s.observe.MaintainLogs(ctx); err != nil {
				log.Error("server log housekeeping", "err", err)
			} else if c+d > 0 {
				log.Info("server log housekeeping", "compressed", c, "deleted", d)
			}
		}},
		{"@every 30s", "spare-clusters", s.RefillSpares},
		{"@every 30s", "kv-snapshots", func(ctx context.Context) {
			if n, err := s.kv.ShipSnapshots(ctx); err != nil {
				log.Error("key-value snapshots", "err", err)
			} else if n > 0 {
				log.Info("key-value snapshots shipped to the backup store", "stores", n)
			}
		}},
		{"@every 30s", "suspend-idle", func(ctx context.Context) {
			if n, err := s.SuspendIdle(ctx); err != nil {
				log.Error("suspend idle projects", "err", err)
			} else if n > 0 {
				log.Info("idle projects suspended", "suspended", n)
			}
		}},
	}
	tasks = append(tasks, s.integrationTasks()...)
	if sw, ok := s.backupObjects.(uploadSweeper); ok {
		tasks = append(tasks, periodicTask{"@every 1h", "backup-store-uploads", func(ctx context.Context) {
			if n, err := sw.SweepUploads(ctx); err != nil {
				log.Warn("backup store: sweep of abandoned uploads", "err", err)
			} else if n > 0 {
				log.Info("backup store: abandoned incomplete uploads aborted", "aborted", n)
			}
		}})
	}
	tasks = append(tasks, s.billingTasks()...)
	tasks = append(tasks, s.referralTasks()...)
	if every := s.cfg.VerifyBackupsEvery; every > 0 {
		tasks = append(tasks, periodicTask{verifyBackupsCheckEvery, "verify-backups", func(ctx context.Context) {
			if res, err := s.VerifyBackups(ctx, s.now(), every); err != nil {
				log.Error("backup restore tests", "result", res, "err", err)
			} else if res != (VerifyBackupsResult{}) {
				log.Info("backup restore tests", "result", res)
			}
		}})
	}
	return tasks
}

// RefillSpares tops the pool of spare clusters up to Config.Spares, logging what failed (the periodic
// task spare-clusters, and up's first fill at start).
func (s *Service) RefillSpares(ctx context.Context) {
	if err := s.EnsureSpares(ctx); err != nil {
		s.log.Warn("spare clusters", "err", err)
	}
}
