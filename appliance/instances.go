package appliance

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/instances"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/store"
)

// serverErr classifies a failure talking to a project's server (apperr.Server: the server going away is
// Unavailable, anything else Internal).
func serverErr(err error, what string) error { return apperr.Server(err, what) }

// adminUser is the superuser the appliance manages every instance with (loopback only).
const adminUser = postgres.AdminRole

// adminConn connects to db on the instance as the admin superuser over loopback. Its search_path is
// postgres.AdminSearchPath: the catalog only, never the tenant's schemas (AdminExec and AdminQueryRow
// included: their statements name what is not in pg_catalog with its schema).
func (s *Service) adminConn(ctx context.Context, inst *store.Instance, db string) (*pgx.Conn, error) {
	return s.adminConnWith(ctx, inst, db, nil)
}

// adminConnWith is adminConn whose session starts with params (postgres.Instance.ConnectWith).
func (s *Service) adminConnWith(ctx context.Context, inst *store.Instance, db string, params map[string]string) (*pgx.Conn, error) {
	pw, err := s.box.Open(inst.AdminPassword)
	if err != nil {
		return nil, fmt.Errorf("open admin password of %s: %w", inst.ID, err)
	}
	return instances.ConnectAdmin(ctx, inst, string(pw), db, params)
}

// quietAdminConn is adminConn whose statements leave no trace in the tenant's statistics or logs: the
// session starts with instances.UntrackedSettings (startup parameters, no statement each). The observability reads
// use it.
func (s *Service) quietAdminConn(ctx context.Context, inst *store.Instance, db string) (*pgx.Conn, error) {
	conn, err := s.adminConnWith(ctx, inst, db, instances.UntrackedSettings)
	if err != nil {
		return nil, serverErr(err, "connect to the project's server")
	}
	return conn, nil
}

// AdminExec runs one statement as the superuser in the project's database. Only tests and operators'
// tools call it; no endpoint reaches it.
func (s *Service) AdminExec(ctx context.Context, projectID, stmt string) error {
	return s.AdminQueryRow(ctx, projectID, stmt, nil)
}

// AdminQueryRow runs one statement as the superuser in the project's database and scans its first row
// into dest (nothing when dest is empty). Only tests and operators' tools call it.
func (s *Service) AdminQueryRow(ctx context.Context, projectID, stmt string, args []any, dest ...any) error {
	prj, inst, err := s.loadProject(projectID)
	if err != nil {
		return err
	}
	if inst == nil {
		return fmt.Errorf("project %s has no instance", projectID)
	}
	conn, err := s.adminConn(ctx, inst, prj.DatabaseName)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if len(dest) == 0 {
		_, err = conn.Exec(ctx, stmt, args...)
		return err
	}
	return conn.QueryRow(ctx, stmt, args...).Scan(dest...)
}

// measureProject reads the size of the project's database and its client connections from the server.
func (s *Service) measureProject(ctx context.Context, prj *store.Project) (storageBytes int64, connections int, err error) {
	if prj.PrimaryInstanceID == "" {
		return 0, 0, nil
	}
	var inst *store.Instance
	if err := s.db.View(func(tx *store.Tx) (err error) { inst, err = store.Instances.Get(tx, prj.PrimaryInstanceID); return err }); err != nil {
		return 0, 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := s.adminConn(ctx, inst, "postgres")
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	err = conn.QueryRow(ctx, `SELECT pg_database_size($1),
		(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND usename IS DISTINCT FROM $2)`,
		prj.DatabaseName, adminUser).Scan(&storageBytes, &connections)
	return storageBytes, connections, err
}
