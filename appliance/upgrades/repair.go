package upgrades

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// RepairEnded puts right, at the appliance's start and before the project's server is watched, what a
// logical upgrade whose job will never run again left (its last attempt cut short by a stop of the
// appliance: the scheduler fails it at the start, so no attempt clears it): the old server's fence (the
// stop came inside the write pause), the new clusters beside the project's (their servers stopped), the
// forward slots and publications on the old server (once it answers: in the background), the attempts'
// archives and backups. Nothing while an upgrade job of the project may still run (its next attempt
// clears it: clearAttempt) or an upgrade awaits confirm or rollback.
func (s *Service) RepairEnded(ctx context.Context, prj *store.Project, inst *store.Instance, log *slog.Logger) {
	if s.eng == nil || inst.PreviousDir != "" {
		return
	}
	var last *store.Job // the project's newest upgrade job
	err := s.db.View(func(tx *store.Tx) error {
		js, err := store.Jobs.Lookup(tx, store.JobsByProject, prj.ID, store.Query{})
		for _, j := range js {
			if j.Type == JobMajor && (last == nil || j.CreatedAt.After(last.CreatedAt)) {
				last = j
			}
		}
		return err
	})
	// Only when it failed so (a stop in its last attempt); one pending or running clears on its own.
	if err != nil || last == nil || last.State != scheduler.StateFailed || !strings.HasPrefix(last.Error, "failed: the appliance stopped while the job ran") {
		return
	}
	cut := []*store.Job{last}
	old := s.eng.Instance(inst)
	if old.Fenced() {
		log.Warn("a major upgrade ended inside its write pause: its old server is let in again", "project", prj.ID)
		if err := old.Fence(false); err != nil {
			log.Error("lift the fence of an ended upgrade", "project", prj.ID, "err", err)
		} else if _, running, _ := old.Status(); running {
			if err := old.Reload(ctx, nil); err != nil {
				log.Error("reload after lifting the fence of an ended upgrade", "project", prj.ID, "err", err)
			}
		}
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(inst.Dir), inst.ID+"-pg*"))
	for _, dir := range left {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() || dir == inst.Dir {
			continue
		}
		rec := *inst
		rec.Dir = dir
		if err := s.eng.Instance(&rec).Remove(ctx); err != nil {
			log.Error("remove the new cluster of an ended upgrade", "project", prj.ID, "dir", dir, "err", err)
		}
	}
	go func() {
		ctx := context.WithoutCancel(ctx)
		for _, j := range cut {
			var in majorPayload
			if json.Unmarshal(j.Payload, &in) == nil && in.TargetMajor > 0 {
				if err := s.host.ForgetCluster(ctx, prj, fmt.Sprintf("pg%d-%s", in.TargetMajor, j.ID)); err != nil {
					log.Error("remove the archive of an ended upgrade", "project", prj.ID, "job", j.ID, "err", err)
				}
			}
		}
		err := waitUntil(ctx, 2*time.Minute, func() error {
			conn, err := s.host.AdminConn(ctx, inst, "postgres")
			if err != nil {
				return err
			}
			dbs, err := databases(ctx, conn)
			conn.Close(ctx)
			if err != nil {
				return err
			}
			return s.dropForward(ctx, inst, dbs)
		})
		if err != nil {
			log.Error("drop the replication slots of an ended upgrade", "project", prj.ID, "err", err)
		}
	}()
}
