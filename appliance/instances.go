package appliance

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/store"
)

// adminUser is the superuser the appliance manages every instance with (loopback only).
const adminUser = "appliance_admin"

// adminConn connects to db on the instance as the admin superuser over loopback.
func (s *Service) adminConn(ctx context.Context, inst *store.Instance, db string) (*pgx.Conn, error) {
	pw, err := s.box.Open(inst.AdminPassword)
	if err != nil {
		return nil, fmt.Errorf("open admin password of %s: %w", inst.ID, err)
	}
	cfg, err := pgx.ParseConfig("")
	if err != nil {
		return nil, err
	}
	cfg.Host, cfg.Port, cfg.User, cfg.Password, cfg.Database = "127.0.0.1", uint16(inst.Port), adminUser, string(pw), db
	cfg.TLSConfig = nil
	cfg.ConnectTimeout = 10 * time.Second
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to instance %s on %s: %w", inst.ID, net.JoinHostPort("127.0.0.1", strconv.Itoa(inst.Port)), err)
	}
	return conn, nil
}

// AdminExec runs one statement as the superuser in the project's database. Only tests and operators'
// tools call it; no endpoint reaches it.
func (s *Service) AdminExec(ctx context.Context, projectID, stmt string) error {
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
	_, err = conn.Exec(ctx, stmt)
	return err
}
