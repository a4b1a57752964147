package appliance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/backup"
	"github.com/theappliance/appliance/appliance/backup/dirstore"
	"github.com/theappliance/appliance/appliance/backup/walsock"
	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/instances"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/store"
)

// BucketArchiveTimeout is the projects' archive_timeout when the backup store is a bucket: a segment
// holding writes goes to the bucket within about this long even when the project writes too little to fill
// it, so losing the machine loses at most this much of committed work (plus an upload). The directory store
// keeps PostgreSQL's default (off): its archive is on the same disk, and 16 MB segments switched every
// minute would fill it.
const BucketArchiveTimeout = time.Minute

// backupStore is where the projects' base backups and WAL archives live: Deps.BackupObjects (a bucket),
// or objects in the local directory <data-dir>/backups, whose files and directories are the instances' OS
// user's.
func (s *Service) backupStore(dp *DataPlane) *backup.Store {
	if s.backupObjects != nil {
		return backup.New(s.backupObjects)
	}
	return s.localBackups(dp)
}

// localBackups is the local directory store <data-dir>/backups, whatever the backup store: the exports
// and uploaded dumps of the projects live under it (<project>/exports, <project>/imports).
func (s *Service) localBackups(dp *DataPlane) *backup.Store {
	var chown func(string) error
	if dp != nil {
		chown = dp.User.Chown
	}
	return backup.New(&dirstore.Dir{Root: filepath.Join(s.cfg.DataDir, "backups"), Chown: chown})
}

// walSocket is where the appliance receives the WAL of a backup store PostgreSQL cannot reach itself.
func (s *Service) walSocket() string { return filepath.Join(s.cfg.DataDir, "wal", "appliance.sock") }

// walCommands are the archive_command and restore_command of the WAL archive walArchive of the project
// (its cluster's: store.Instance.WALArchive): the store's own (the directory store's cp), or the
// appliance's program talking to its WAL socket (StartWAL).
func (s *Service) walCommands(ctx context.Context, dp *DataPlane, projectID, walArchive string) (archive, restore string, err error) {
	bs := s.backupStore(dp)
	if bs.HasWALCommands() {
		return bs.WALCommands(ctx, projectID, walArchive)
	}
	if err := backup.CheckProjectID(projectID); err != nil {
		return "", "", err
	}
	if err := backup.CheckWALArchive(walArchive); err != nil {
		return "", "", err
	}
	return walsock.Commands(s.cfg.WALProgram, s.walSocket(), projectID, walArchive)
}

// StartWAL serves the backup store's WAL archive on the WAL socket when PostgreSQL cannot reach the store
// itself (a bucket): archive_command and restore_command run Config.WALProgram, which talks to it. Nothing
// to do for the directory store. Stop it with StopWAL after the instances stopped.
func (s *Service) StartWAL(ctx context.Context) error {
	if s.dp == nil || s.backupStore(s.dp).HasWALCommands() {
		return nil
	}
	if len(s.cfg.WALProgram) == 0 {
		return errors.New("the backup store needs the appliance to carry the WAL, and no program was given for it (Config.WALProgram)")
	}
	srv, err := walsock.Start(s.walSocket(), s.dp.User.Chown, s.backupStore(s.dp), s.log)
	if err != nil {
		return err
	}
	s.walServer = srv
	return nil
}

// StopWAL stops serving the WAL socket (pushes in progress finish first, until ctx ends). Idempotent.
func (s *Service) StopWAL(ctx context.Context) error {
	if s.walServer == nil {
		return nil
	}
	return s.walServer.Stop(ctx)
}

// backupStoreCheck is /status's "backup-store" component: where the backups live; whether every project's
// WAL reaches it, from the observability sampler's last reading of each server's archiver (the lag: the
// most WAL one project has waiting on the local disk, and how long ago the archive of the stalest of those
// last advanced); and, with a bucket, the last upload through the WAL socket. Degraded while a project's
// archiving fails or the last upload failed.
func backupStoreCheck(s *Service) Check {
	return func(ctx context.Context) (string, string) {
		status, now := StatusOperational, s.now()
		var parts []string
		if str, ok := s.backupObjects.(fmt.Stringer); ok {
			parts = append(parts, str.String())
		} else {
			parts = append(parts, filepath.Join(s.cfg.DataDir, "backups")+" (this machine's disk)")
		}
		if s.walServer != nil {
			switch p := s.walServer.Pushes(); {
			case !p.LastErrorAt.IsZero() && p.LastErrorAt.After(p.LastStored):
				status = StatusDegraded
				parts = append(parts, fmt.Sprintf("the last upload failed %s ago: %s", ago(now, p.LastErrorAt), p.LastError))
			case p.LastStored.IsZero():
				parts = append(parts, "no WAL uploaded since the start")
			default:
				parts = append(parts, fmt.Sprintf("last upload %s ago", ago(now, p.LastStored)))
			}
		}
		a := s.observe.Archive()
		switch {
		case a.ReadAt.IsZero():
			parts = append(parts, "WAL archiving not sampled yet")
		default:
			lag := "WAL lag " + api.FormatBytes(a.MaxPendingBytes)
			if a.OldestArchived != nil {
				lag += fmt.Sprintf(", %s since the archive last advanced", ago(now, *a.OldestArchived))
			}
			parts = append(parts, fmt.Sprintf("%s (%d projects, sampled %s ago)", lag, a.Projects, ago(now, a.ReadAt)))
		}
		if len(a.Failing) > 0 {
			status = StatusDegraded
			parts = append(parts, fmt.Sprintf("archiving fails for %d of %d projects: %s", len(a.Failing), a.Projects, strings.Join(a.Failing, ", ")))
		}
		return status, strings.Join(parts, "; ")
	}
}

// ago is how long before now t was, to the second.
func ago(now, t time.Time) time.Duration { return max(0, now.Sub(t)).Round(time.Second) }

var errTarEnded = errors.New("tar ended before the end of the stream")

// archiveOf is the instance engine's view of a project's backup store: its WAL archive (whether a segment
// of the running cluster is stored; the restore_command of the archive of the cluster the backup is of,
// which is another after a major upgrade by logical replication) and the base backup key, fetched into a
// data directory.
func (s *Service) archiveOf(ctx context.Context, dp *DataPlane, projectID, key string) (instances.Archive, error) {
	bs := s.backupStore(dp)
	var running, of string
	err := s.db.View(func(tx *store.Tx) error {
		prj, err := store.Projects.Get(tx, projectID)
		if err != nil {
			return err
		}
		if prj.PrimaryInstanceID != "" {
			inst, err := store.Instances.Get(tx, prj.PrimaryInstanceID)
			if err != nil {
				return err
			}
			running = inst.WALArchive
		}
		bks, err := store.Backups.Lookup(tx, store.BackupsByProject, projectID, store.Query{})
		if err != nil {
			return err
		}
		for _, b := range bks {
			if b.BackupKey == key {
				of = b.WALArchive
			}
		}
		return nil
	})
	if err != nil {
		return instances.Archive{}, fmt.Errorf("the WAL archive of backup %s: %w", key, err)
	}
	_, restore, err := s.walCommands(ctx, dp, projectID, of)
	if err != nil {
		return instances.Archive{}, err
	}
	return instances.Archive{
		Archived: func(ctx context.Context, seg string) (bool, error) {
			return bs.WALArchived(ctx, projectID, running, seg)
		},
		RestoreCommand: restore,
		FetchBase: func(ctx context.Context, ex daemon.ExecFunc, dataDir string) error {
			return s.fetchBackup(ctx, ex, dp, projectID, key, dataDir)
		},
	}, nil
}

// fetchBackup makes dataDir (absent, or empty) a copy of a base backup's data directory: where the data
// directory has reflinks and the backup is in the local directory store, a copy of its files by reflink
// (postgres.CopyTree, synced); else the store's tar stream of it, extracted by the instances' OS user (so
// owners and modes are PostgreSQL's).
func (s *Service) fetchBackup(ctx context.Context, ex daemon.ExecFunc, dp *DataPlane, projectID, key, dataDir string) error {
	if err := dp.User.Mkdir(dataDir, 0o700); err != nil {
		return err
	}
	if s.reflinks {
		dir, err := s.backupStore(dp).BackupDir(ctx, projectID, key)
		if err != nil {
			return fmt.Errorf("read the base backup %s from the backup store: %w", key, err)
		}
		if dir != "" {
			st, err := postgres.CopyTree(ctx, dp.User, dir, dataDir)
			if err != nil {
				return fmt.Errorf("copy the base backup %s: %w", key, err)
			}
			s.log.Info("base backup copied", "backup", key, "files", st.Files, "reflinked", st.Reflinked,
				"copy_ms", st.Copy.Milliseconds(), "sync_ms", st.Sync.Milliseconds())
			return nil
		}
	}
	pr, pw := io.Pipe()
	cmd := dp.User.Command("tar", "-x", "-p", "-f", "-", "-C", dataDir)
	cmd.Stdin = pr
	written := make(chan error, 1)
	go func() {
		err := s.backupStore(dp).WriteBackupTar(ctx, projectID, key, pw)
		pw.CloseWithError(err)
		written <- err
	}()
	err := daemon.OrDefault(ex)(ctx, cmd)
	pr.CloseWithError(errTarEnded) // a writer still blocked returns
	if werr := <-written; werr != nil && !errors.Is(werr, errTarEnded) {
		return fmt.Errorf("read the base backup %s from the backup store: %w", key, werr)
	}
	if err != nil {
		return fmt.Errorf("extract the base backup %s: %w", key, err)
	}
	return nil
}

// uploadSweeper is a backup store whose incomplete uploads cost until aborted (s3store.Bucket): the
// periodic task backup-store-uploads aborts those nobody will resume.
type uploadSweeper interface {
	SweepUploads(ctx context.Context) (int, error)
}

// retentionStore is the backup store for deleting (no data plane needed: nothing is chowned).
func (s *Service) retentionStore() *backup.Store { return s.backupStore(s.dp) }

// bucketURL is a bucket backup store's s3://bucket/prefix/, which names no endpoint or credentials.
type bucketURL interface{ URL() string }

// backupStorage is where the project's backups live (a bucket's s3:// location, never its endpoint; or
// the directory on this machine) and its WAL archiving as the observability sampler last read it.
func (s *Service) backupStorage(projectID string) *api.BackupStorage {
	st := &api.BackupStorage{Kind: api.BackupStorageLocal, Location: filepath.Join(s.cfg.DataDir, "backups", projectID) + "/"}
	if s.backupObjects != nil {
		st.Kind, st.Location = api.BackupStorageBucket, "a bucket"
		if b, ok := s.backupObjects.(bucketURL); ok {
			st.Location = b.URL() + projectID + "/"
		}
	}
	a, ok := s.observe.ArchiveOf(projectID)
	if !ok {
		return st
	}
	st.Archiving = &api.WALArchiving{SampledAt: a.ReadAt, LastArchivedWAL: a.ArchivedWAL, LastArchivedAt: a.ArchivedAt,
		Failing: a.Failing(), LastFailedWAL: a.FailedWAL, LastFailedAt: a.FailedAt, PendingBytes: a.PendingBytes}
	if a.PendingBytes > 0 && a.ArchivedAt != nil {
		lag := int64(max(0, a.ReadAt.Sub(*a.ArchivedAt)) / time.Second)
		st.Archiving.LagSeconds = &lag
	}
	return st
}
