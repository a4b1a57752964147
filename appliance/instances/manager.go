// Package instances is the instance engine: the process and PostgreSQL side of the projects' instances and
// their poolers (spares, the quiet admin sessions, the provision steps, clone fill, recovery and the
// restore swap, the settings' application, the process half of adopt and stop). It keeps no records: the
// caller (the appliance's job handlers) loads them, hands them in with their secrets opened, and records
// the outcome.
package instances

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/theappliance/appliance/appliance/certs"
	"github.com/theappliance/appliance/appliance/cgroups"
	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// Config is what a Manager drives: the supervisor of instances and poolers, the OS user they run as, the
// binaries and the CA that issues their certificates, and where the instances live and listen.
type Config struct {
	Supervisor *daemon.Supervisor
	User       *daemon.OSUser
	Bin        postgres.Binaries
	CA         *certs.CA
	PgBouncer  string // the pgbouncer program
	ListenHost string
	// Dir holds one directory per instance; it must be traversable by the instances' OS user.
	Dir string
	// CertHosts are the names an instance certificate covers.
	CertHosts []string
	Log       *slog.Logger
	// Step, when not nil, is called at the named steps of a restore (see Manager.Restore).
	Step func(ctx context.Context, jobID, step string)
	// Cgroups, when not nil, holds each project's server to Limits (held.go); nil: not held (up --cgroups off).
	Cgroups *cgroups.Groups
	// Limits are a project's memory and CPU (its plan's).
	Limits func(prj *store.Project) cgroups.Limits
	// NoSync: the instances run without durability (postgres.Instance.NoSync), for throwaway appliances.
	NoSync bool
	// TemplateDir keeps the initdb templates new instances are copied from (postgres.Instance.TemplateDir;
	// "": each runs initdb).
	TemplateDir string
	// Reflink: Dir is on a filesystem with reflinks (postgres.ReflinkSupport): a clone's online copy copies
	// files by reflink, then syncs the copy (postgres.CopyOptions.Reflink).
	Reflink bool
}

// Manager runs the instances.
type Manager struct {
	cfg Config
	// spareConns holds an admin connection to each spare this process prepared (see TakeSpareConn).
	spareConns sync.Map // instance ID → *pgx.Conn
	// userLists serializes each instance's pooler user list (SyncPoolerUsers).
	userLists sync.Map // instance ID → *sync.Mutex
	// held are the limits each instance's group was last given (see hold).
	held sync.Map // instance ID → cgroups.Limits
}

// New makes a Manager.
func New(cfg Config) *Manager {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Manager{cfg: cfg}
}

func (m *Manager) step(ctx context.Context, jobID, step string) {
	if m.cfg.Step != nil {
		m.cfg.Step(ctx, jobID, step)
	}
}

// Instance is the postgres value of an instance record.
func (m *Manager) Instance(rec *store.Instance) *postgres.Instance {
	bin := m.cfg.Bin
	if rec.BinDir != "" && rec.BinDir != bin.Dir {
		bin = postgres.Binaries{Dir: rec.BinDir, Major: rec.Major}
	}
	return &postgres.Instance{ID: rec.ID, Dir: rec.Dir, ListenHost: m.cfg.ListenHost, Port: rec.Port, Bin: bin, User: m.cfg.User, NoSync: m.cfg.NoSync,
		TemplateDir: m.cfg.TemplateDir, SyncFS: m.cfg.Reflink}
}

// previousOf is the record of a major upgrade's old server: its data, binaries and (logical upgrades) port.
func previousOf(rec *store.Instance) *store.Instance {
	prev := *rec
	prev.Dir, prev.Major, prev.BinDir = rec.PreviousDir, rec.PreviousMajor, rec.PreviousBinDir
	if rec.PreviousPort != 0 {
		prev.Port = rec.PreviousPort
	}
	prev.PreviousDir, prev.PreviousMajor, prev.PreviousBinDir, prev.PreviousPort = "", 0, "", 0
	return &prev
}

// Pooler is the PgBouncer of an instance record (its pool size from the project's max_connections).
func (m *Manager) Pooler(rec *store.Instance, prj *store.Project) *postgres.Pooler {
	pi := m.Instance(rec)
	return &postgres.Pooler{ID: rec.ID + "-pooler", Dir: filepath.Join(rec.Dir, "pooler"), ListenHost: m.cfg.ListenHost,
		Port: rec.PooledPort, TargetPort: rec.Port, PoolSize: postgres.PoolSizeFor(prj.MaxConnections),
		CertFile: pi.CertFile(), KeyFile: pi.KeyFile(), CAFile: pi.CAFile(), Program: m.cfg.PgBouncer, User: m.cfg.User}
}

// Watch puts an instance and its pooler under supervision.
func (m *Manager) Watch(rec *store.Instance, prj *store.Project) error {
	// Both, whatever the first answers: a supervisor that stopped meanwhile stops what it is handed (a spare
	// prepared during a shutdown), the pooler included.
	pgi := m.Instance(rec)
	if prj.ID != "" { // a spare's placeholder has none: a spare is not held until a project takes it
		m.hold(rec.ID, pgi, m.limits(prj))
	}
	return errors.Join(m.watchHeld(rec.ID, pgi), m.cfg.Supervisor.Watch(rec.ID+"/pooler", m.Pooler(rec, prj)))
}

// WatchSpare puts a spare under supervision: its pooler (none in older spares) with the pool size of
// maxConnections, the placeholders'.
func (m *Manager) WatchSpare(rec *store.Instance, maxConnections int) error {
	err := m.cfg.Supervisor.Watch(rec.ID, m.Instance(rec))
	if err == nil && rec.PooledPort != 0 {
		err = m.cfg.Supervisor.Watch(rec.ID+"/pooler", m.Pooler(rec, &store.Project{MaxConnections: maxConnections}))
	}
	return err
}

// Unwatch takes an instance and its pooler from supervision.
func (m *Manager) Unwatch(rec *store.Instance) {
	m.cfg.Supervisor.Unwatch(rec.ID)
	m.cfg.Supervisor.Unwatch(rec.ID + "/pooler")
}

// Remove stops and deletes an instance and its pooler (a kept spare connection closed first). Each step is
// idempotent.
func (m *Manager) Remove(ctx context.Context, rec *store.Instance) error {
	if conn := m.TakeSpareConn(ctx, rec.ID); conn != nil {
		conn.Close(context.WithoutCancel(ctx))
	}
	m.Unwatch(rec)
	if err := errors.Join(m.Pooler(rec, &store.Project{}).Remove(ctx), m.Instance(rec).Remove(ctx)); err != nil {
		return err
	}
	if rec.PreviousDir != "" { // a major upgrade's old server and data, kept until confirm
		if err := m.Instance(previousOf(rec)).Remove(ctx); err != nil {
			return err
		}
	}
	m.removeGroup(rec.ID)
	return nil
}

// Serving reports whether the instance's server accepts connections and its pooler (when it has one) runs.
func (m *Manager) Serving(ctx context.Context, rec *store.Instance, prj *store.Project) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	pgUp := m.Instance(rec).Accepting(ctx) == nil
	cancel()
	_, poolerUp, _ := m.Pooler(rec, prj).Status()
	return pgUp && (poolerUp || rec.PooledPort == 0)
}

// StopAll stops, fast and at once, each of the instances (and their poolers) and the other processes that
// still runs: the last step of a shutdown.
func (m *Manager) StopAll(ctx context.Context, insts []*store.Instance, others []daemon.Process) error {
	var procs []daemon.Process
	for _, in := range insts {
		procs = append(procs, m.Instance(in))
		if in.PreviousPort != 0 && in.PreviousDir != "" { // the old server a logical major upgrade keeps running
			procs = append(procs, m.Instance(previousOf(in)))
		}
		if in.PooledPort != 0 { // a project's, or a spare's
			procs = append(procs, m.Pooler(in, &store.Project{}))
		}
	}
	procs = append(procs, others...)
	errs := make([]error, len(procs))
	var wg sync.WaitGroup
	for n, p := range procs {
		if _, running, _ := p.Status(); !running {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[n] = p.Stop(ctx, daemon.OrDefault(m.cfg.Supervisor.Exec), daemon.StopFast)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// ApplySettings writes the instance's settings and the pooler's pool size, then reloads or restarts as
// PostgreSQL requires. The supervisor lets go of the instance during a restart so it does not race the
// restart; restarting is told true before it and false after. adminPW is the instance's admin password
// (a reload is checked over an admin session).
func (m *Manager) ApplySettings(ctx context.Context, exec daemon.ExecFunc, inst *store.Instance, prj *store.Project,
	settings postgres.Settings, adminPW string, restarting func(bool)) (postgres.Action, error) {
	pgi := m.Instance(inst)
	previous, prevErr := pgi.ReadSettings()
	action, err := pgi.WriteSettings(settings)
	if err != nil {
		return 0, err
	}
	if action == postgres.ActionRestart {
		err = m.unwatched(inst, prj, restarting, func() error { return pgi.Apply(ctx, exec, action) })
		if errors.Is(err, postgres.ErrSettingsRefused) {
			return 0, err // it runs, with the settings it had: retrying would not help
		}
		if err != nil {
			return 0, scheduler.Transient(err)
		}
	} else if err := pgi.Apply(ctx, exec, action); err != nil {
		return 0, scheduler.Transient(err)
	} else if action == postgres.ActionReload {
		// A reload the server refuses in part leaves it running the old values while the files say
		// otherwise: put the previous settings back and fail with the server's reason.
		if err := checkReloaded(ctx, pgi, adminPW); err != nil {
			if prevErr == nil {
				if _, werr := pgi.WriteSettings(previous); werr == nil {
					_ = pgi.Apply(ctx, exec, postgres.ActionReload)
				}
			}
			return 0, err
		}
	}
	m.hold(inst.ID, pgi, m.limits(prj)) // the plan's memory and CPU, which a plan change changes
	pl := m.Pooler(inst, prj)
	if err := pl.WriteConfig(); err != nil {
		return 0, err
	}
	if err := pl.Reload(); err != nil {
		return 0, scheduler.Transient(err)
	}
	return action, nil
}

// Restart stops the instance's server (fast: its sessions end) and starts it again, then its pooler (a
// running one: a project's server has one unless it predates poolers), as one operation: the restart of a
// minor upgrade and of POST …/restart. restarting is told true before it and false after.
func (m *Manager) Restart(ctx context.Context, exec daemon.ExecFunc, inst *store.Instance, prj *store.Project, restarting func(bool)) error {
	pgi := m.Instance(inst)
	return m.unwatched(inst, prj, restarting, func() error {
		if err := pgi.Restart(ctx, exec); err != nil {
			return err
		}
		if inst.PooledPort == 0 {
			return nil
		}
		pl := m.Pooler(inst, prj)
		if err := pl.Stop(ctx, exec, daemon.StopFast); err != nil {
			return err
		}
		return pl.Start(ctx, exec)
	})
}

// unwatched runs fn (a restart) with the instance and its pooler out of the supervisor's watch, so the
// supervisor does not race it, and watches them again whatever fn returned; restarting is told true before
// and false after.
func (m *Manager) unwatched(inst *store.Instance, prj *store.Project, restarting func(bool), fn func() error) error {
	restarting(true)
	m.Unwatch(inst)
	err := fn()
	if werr := m.Watch(inst, prj); err == nil {
		err = werr
	}
	restarting(false)
	return err
}

// checkReloaded asks the server, after a reload, whether it applied every line of its files.
func checkReloaded(ctx context.Context, pgi *postgres.Instance, adminPW string) error {
	conn, err := pgi.Admin(ctx, adminPW)
	if err != nil {
		return scheduler.Transient(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return pgi.CheckReloaded(ctx, conn)
}
