package instances

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// ProvisionSpec is what Provision makes: the instance of a project, with its secrets opened.
type ProvisionSpec struct {
	Instance      *store.Instance // its record: directory, ports (a claimed spare's, or new ones)
	Project       *store.Project
	AdminPassword string
	Credential    Credential
	Settings      postgres.Settings
	// Clone, when not nil, makes the new data directory from another instance's data instead of initdb.
	Clone *CloneSpec
	// PortTaken is told of a start that failed (the server's, or the pooler's when pooler): it returns the
	// error to report (moving the port for the next attempt when another process took it).
	PortTaken func(pooler bool, err error) error
	Steps     *Timer
	// Fenced starts the server fenced (postgres.Instance.Fence: only the admin's loopback logins, which
	// the provisioning uses; the pooler's logins to the server are refused as well): the caller lets
	// clients in once it may (a move's target, once its word that it opened the project is written).
	Fenced bool
}

// Provision creates, starts and configures a project's instance and pooler (initdb or a claimed spare or
// a clone's fill; start; roles, database and logins; the pooler's users and start) and returns the
// server's version. Every step checks what exists, so a retry after a crash continues where the last
// attempt stopped. It leaves the instance unwatched: the caller records it running, then calls Watch.
func (m *Manager) Provision(ctx context.Context, exec daemon.ExecFunc, spec ProvisionSpec) (string, error) {
	inst, prj, steps := spec.Instance, spec.Project, spec.Steps
	pgi := m.Instance(inst)
	opts := postgres.InitOptions{AdminPassword: spec.AdminPassword, Settings: spec.Settings}
	var parentAdminPW string // a clone's cluster starts with its source's admin password
	if spec.Clone != nil {
		opts.Fill, parentAdminPW = m.cloneFill(exec, spec.Clone, steps), spec.Clone.AdminPassword
	}
	var err error
	if !pgi.Initialized() { // a claimed spare has its certificate already
		if opts.CertPEM, opts.KeyPEM, opts.CAPEM, err = m.cfg.CA.InstanceTLS(m.cfg.CertHosts...); err != nil {
			return "", fmt.Errorf("instance certificate: %w", err)
		}
	}
	steps.Done("prepare")
	err = pgi.Init(ctx, exec, opts)
	if errors.Is(err, postgres.ErrInitialized) {
		// A claimed spare (or an earlier attempt): give it this project's settings. The supervisor lets
		// go of it meanwhile so that a restart the settings need does not race it.
		m.Unwatch(inst)
		var action postgres.Action
		if action, err = pgi.WriteSettings(spec.Settings); err == nil {
			err = pgi.Apply(ctx, exec, action)
		}
	}
	if err == nil && spec.Fenced {
		err = pgi.Fence(true)
	}
	if err != nil {
		return "", err
	}
	steps.Done("init")
	since := time.Now()
	// Not through the job's exec: that waits for pg_ctl -w, which looks at the server every 100 ms, and
	// then records its output on the job (a store write); without it the start returns as soon as the
	// server accepts connections (pg_ctl's failure, with its output, is still the error).
	if err := pgi.Start(ctx, nil); err != nil {
		return "", scheduler.Transient(spec.PortTaken(false, err))
	}
	if parentAdminPW != "" {
		if err := m.finishRecovery(ctx, pgi, parentAdminPW, since); err != nil {
			return "", err
		}
	}
	steps.Done("start")
	conn := m.TakeSpareConn(ctx, inst.ID)
	if conn == nil && parentAdminPW != "" {
		// A clone has its parent's admin password until adopted (a retry finds it adopted: its own).
		var aerr error
		if conn, aerr = adoptClone(ctx, pgi, prj, parentAdminPW, spec.AdminPassword); aerr != nil {
			if conn, err = pgi.ConnectWith(ctx, spec.AdminPassword, "postgres", UntrackedSettings); err != nil {
				return "", scheduler.Transient(errors.Join(aerr, err))
			}
		}
	} else if conn == nil {
		if conn, err = pgi.ConnectWith(ctx, spec.AdminPassword, "postgres", UntrackedSettings); err != nil {
			return "", scheduler.Transient(err)
		}
	}
	defer conn.Close(context.WithoutCancel(ctx))
	steps.Done("connect")
	adopted := false // a clone's data is its parent's, never a spare's
	if parentAdminPW == "" {
		adopted, err = adoptSpare(ctx, conn, prj, spec.Credential)
	}
	if err == nil && !adopted {
		err = ensureRoles(ctx, conn, prj, spec.Credential)
	}
	if err != nil {
		return "", err
	}
	steps.Done("roles_and_database")
	// The database's preparation (its own session) runs beside the pooler's users and start, which need
	// the logins set, not the database prepared; the job ends when both have.
	prepared := make(chan error, 1)
	if adopted { // a spare's database was prepared when the spare was made
		prepared <- nil
	} else {
		admin := conn.Config()
		admin.Password = spec.AdminPassword // a clone's session started with its parent's (adoptClone)
		go func() { prepared <- prepareDatabase(ctx, admin, prj, prj.DatabaseName) }()
	}
	if err := m.SyncPoolerUsers(ctx, conn, inst, prj); err != nil {
		<-prepared
		return "", err
	}
	steps.Done("pooler_users")
	pl := m.Pooler(inst, prj)
	if _, running, _ := pl.Status(); running { // a claimed spare's: the project's pool size and users
		err = pl.WriteConfig()
		if err == nil {
			err = pl.Reload()
		}
		if err != nil {
			<-prepared
			return "", scheduler.Transient(err)
		}
	} else if err := pl.Start(ctx, nil); err != nil { // not through the job's exec either: no store write
		<-prepared
		return "", scheduler.Transient(spec.PortTaken(true, err))
	}
	steps.Done("pooler")
	if err := <-prepared; err != nil {
		return "", err
	}
	steps.Done("database")
	version := conn.PgConn().ParameterStatus("server_version") // the server reports it when a session starts
	if version == "" {
		if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil {
			return "", scheduler.Transient(err)
		}
	}
	version, _, _ = strings.Cut(version, " ")
	return version, nil
}

// adoptClone connects to a clone that still has its parent's admin password and gives it its own, and its
// second login a new random password (the project's is not the preview's), in one transaction. Its sessions
// start untracked (no SET per setting). A retry finds it done (the parent's password then fails).
func adoptClone(ctx context.Context, pgi *postgres.Instance, prv *store.Project, parentPW, ownPW string) (*pgx.Conn, error) {
	stmts := []string{}
	for _, r := range []struct{ name, pw string }{{postgres.AdminRole, ownPW}, {AltRole(prv.RoleName), ids.Secret(20)}} {
		q, err := SetPasswordSQL("ALTER ROLE", r.name, "LOGIN", r.pw)
		if err != nil {
			return nil, err
		}
		stmts = append(stmts, q)
	}
	conn, err := pgi.ConnectWith(ctx, parentPW, "postgres", UntrackedSettings)
	if err != nil {
		return nil, err
	}
	_, err = conn.Exec(ctx, strings.Join(stmts, "; "))
	if isUndefinedRole(err) { // a project from before the second login: the admin's alone
		_, err = conn.Exec(ctx, stmts[0])
	}
	if err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("give the clone its own passwords: %w", err)
	}
	// The session goes on (a new password does not end it); its configuration still holds the parent's
	// password: Provision's later connections take the clone's own.
	return conn, nil
}

func isUndefinedRole(err error) bool {
	var pe interface{ SQLState() string }
	return errors.As(err, &pe) && pe.SQLState() == "42704"
}
