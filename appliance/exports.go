package appliance

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"

	"github.com/theappliance/appliance/appliance/exports"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// The exports area lives in appliance/exports (its endpoints, its job, the sweep); the service holds it,
// built in New. The dumps' directory and pg_dump stay here: the cutover dumps a preview with them too.

// Exports is the exports area: httpapi's export routes call its methods, the sweep calls Sweep.
func (s *Service) Exports() *exports.Service { return s.exports }

// newExports builds the area with the service's collaborators (New).
func (s *Service) newExports(cfg Config, deps Deps) *exports.Service {
	return exports.New(exports.Config{DataDir: cfg.DataDir},
		exports.Deps{DB: deps.DB, Log: deps.Log, Clock: s.now, URLs: s.urls, Host: areaHost{s}})
}

// exportDir is the directory of a project's exports in the backup store.
func (s *Service) exportDir(projectID string) string { return exports.Dir(s.cfg.DataDir, projectID) }

// prepareDumpDir makes the project's directory of dumps (its exports, a cutover's copy of a preview),
// owned by the instances' OS user, and returns it. Its errors are transient.
func (s *Service) prepareDumpDir(ctx context.Context, dp *DataPlane, projectID string) (string, error) {
	if err := s.localBackups(dp).Prepare(ctx, projectID); err != nil {
		return "", scheduler.Transient(err)
	}
	dir := s.exportDir(projectID)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", scheduler.Transient(err)
	}
	if err := dp.User.Chown(dir); err != nil {
		return "", scheduler.Transient(err)
	}
	return dir, nil
}

// dumpDatabase writes a custom-format dump (pg_dump -Fc, as the admin) of the instance's database to path,
// replacing any file there; a failed dump leaves no file. The dump is the whole database: only the
// instances' OS user reads it (pg_dump keeps the mode of the file it truncates, so it is created first,
// 0600). Errors about the file are transient.
func (s *Service) dumpDatabase(ctx context.Context, run *scheduler.Run, dp *DataPlane, inst *store.Instance, database, path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return scheduler.Transient(err)
	}
	if f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600); err != nil {
		return scheduler.Transient(err)
	} else if err := f.Close(); err != nil {
		return scheduler.Transient(err)
	}
	if err := dp.User.Chown(path); err != nil {
		return scheduler.Transient(err)
	}
	adminPW, err := s.box.Open(inst.AdminPassword)
	if err != nil {
		return fmt.Errorf("open admin password: %w", err)
	}
	pgdump, err := s.eng.Instance(inst).Bin.Path("pg_dump")
	if err != nil {
		return err
	}
	cmd := dp.User.Command(pgdump, "-Fc", "--no-password", "-h", "127.0.0.1", "-p", strconv.Itoa(inst.Port),
		"-U", postgres.AdminRole, "-d", database, "-f", path)
	// role=none: the session's own role whatever the database's defaults say (postgres.Instance.Connect).
	cmd.Env = append(cmd.Env, "PGPASSWORD="+string(adminPW), "PGSSLMODE=disable", "PGCONNECT_TIMEOUT=10", "PGOPTIONS=-c role=none")
	if err := run.Exec(ctx, cmd); err != nil {
		_ = os.Remove(path)
		return err
	}
	return nil
}
