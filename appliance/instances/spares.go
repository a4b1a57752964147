package instances

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/store"
)

// A spare is a prepared cluster owned by no project: initialized (initdb, TLS, configuration), running
// under supervision on a port reserved for it, with a placeholder role, second login and database, and its
// PgBouncer running on a second reserved port. Provisioning claims one and renames the placeholders
// instead of running initdb, starting a server and a pooler and creating a database, which are nearly all
// of its cost.

// Placeholder names inside a spare, renamed to the project's when it is claimed.
const (
	spareRole     = "appliance_spare_owner"
	spareDatabase = "appliance_spare_db"
)

// spareTmpPrefix names directories of spares being prepared; a crash leaves them behind and the next
// RemoveSpareLeftovers removes them.
const spareTmpPrefix = ".spare-"

// RemoveSpareLeftovers deletes the temporary directories interrupted spare preparations left (call it only
// while no preparation runs).
func (m *Manager) RemoveSpareLeftovers() {
	entries, _ := os.ReadDir(m.cfg.Dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), spareTmpPrefix) {
			os.RemoveAll(filepath.Join(m.cfg.Dir, e.Name()))
		}
	}
}

// PrepareSpare initializes the spare rec (its ports reserved) in a temporary directory, moves it to its
// final place (rec.Dir), starts it, creates the placeholders with a pool of maxConnections, starts its
// pooler and hands both to the supervisor; then ready records it. A failure from the start on (ready's
// included) stops what it started: until the supervisor has them, nothing else would.
func (m *Manager) PrepareSpare(ctx context.Context, rec *store.Instance, adminPW string, settings postgres.Settings,
	maxConnections int, ready func() error) (err error) {
	tmp := *rec
	tmp.Dir = filepath.Join(m.cfg.Dir, spareTmpPrefix+rec.ID)
	certPEM, keyPEM, caPEM, err := m.cfg.CA.InstanceTLS(m.cfg.CertHosts...)
	if err != nil {
		return err
	}
	if err := m.Instance(&tmp).Init(ctx, nil, postgres.InitOptions{AdminPassword: adminPW, CertPEM: certPEM, KeyPEM: keyPEM, CAPEM: caPEM, Settings: settings}); err != nil {
		return err
	}
	if err := os.Rename(tmp.Dir, rec.Dir); err != nil {
		return err
	}
	pgi := m.Instance(rec)
	// Written again from the final directory (the archive command names it).
	if _, err := pgi.WriteSettings(settings); err != nil {
		return err
	}
	if err := pgi.Start(ctx, nil); err != nil {
		return err
	}
	// From here a failure (the appliance stopping under it, say) stops what it started: until the
	// supervisor has them, nothing else would.
	defer func() {
		if err != nil {
			stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			m.Pooler(rec, &store.Project{}).Stop(stop, nil, daemon.StopFast)
			pgi.Stop(stop, nil, daemon.StopFast)
		}
	}()
	// Quiet from its start: the claim sends the project's password over it.
	conn, err := pgi.ConnectWith(ctx, adminPW, "postgres", UntrackedSettings)
	if err != nil {
		return err
	}
	kept := false
	defer func() {
		if !kept {
			conn.Close(context.WithoutCancel(ctx))
		}
	}()
	placeholder := &store.Project{RoleName: spareRole, DatabaseName: spareDatabase, MaxConnections: maxConnections}
	if err := ensureRolesAndDatabase(ctx, conn, placeholder, Credential{Username: spareRole, Password: ids.Secret(20)}); err != nil {
		return err
	}
	if err := m.SyncPoolerUsers(ctx, conn, rec, placeholder); err != nil {
		return err
	}
	if err := m.Pooler(rec, placeholder).Start(ctx, nil); err != nil {
		return err
	}
	if err := m.Watch(rec, placeholder); err != nil {
		return err
	}
	m.spareConns.Store(rec.ID, conn)
	kept = true
	return ready()
}

// TakeSpareConn hands over the admin connection kept since the spare's preparation, when there is one
// and it still works (a restart of the spare ends it): a claim then waits for no new backend, which on a
// busy machine costs tens of milliseconds. A spare prepared by an earlier process has none. The caller
// closes it.
func (m *Manager) TakeSpareConn(ctx context.Context, instanceID string) *pgx.Conn {
	v, ok := m.spareConns.LoadAndDelete(instanceID)
	if !ok {
		return nil
	}
	conn := v.(*pgx.Conn)
	if err := conn.Ping(ctx); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil
	}
	return conn
}

// CloseSpareConns closes the kept connections (at shutdown).
func (m *Manager) CloseSpareConns() {
	m.spareConns.Range(func(id, v any) bool {
		m.spareConns.Delete(id)
		v.(*pgx.Conn).Close(context.Background())
		return true
	})
}

// adoptSpare gives a claimed spare's placeholder roles and database the project's names and sets its logins
// (setLogins), and reports whether there were placeholders. The placeholders were made by
// ensureRolesAndDatabase: renamed, they keep their grants, ownerships and privileges (which follow the
// objects, not their names); what names a role by its name, and the password, are set here.
func adoptSpare(ctx context.Context, conn *pgx.Conn, prj *store.Project, cred Credential) (bool, error) {
	var placeholder bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)", spareRole).Scan(&placeholder); err != nil || !placeholder {
		return false, err
	}
	logins, err := loginStatements(prj, cred)
	if err != nil {
		return false, err
	}
	if err := Untracked(ctx, conn); err != nil {
		return false, err
	}
	stmts := append([]string{
		"ALTER ROLE " + pgx.Identifier{spareRole}.Sanitize() + " RENAME TO " + pgx.Identifier{prj.RoleName}.Sanitize(),
		"ALTER ROLE " + pgx.Identifier{AltRole(spareRole)}.Sanitize() + " RENAME TO " + pgx.Identifier{AltRole(prj.RoleName)}.Sanitize(),
		"ALTER DATABASE " + pgx.Identifier{spareDatabase}.Sanitize() + " RENAME TO " + pgx.Identifier{prj.DatabaseName}.Sanitize(),
	}, logins...)
	// One message of statements, which PostgreSQL runs as one transaction: one round trip and one commit,
	// and a crash renames and sets all or nothing (a retry finds the placeholders again).
	if _, err := conn.Exec(ctx, strings.Join(stmts, "; ")); err != nil {
		return false, fmt.Errorf("adopt spare: %w", err)
	}
	return true, nil
}
