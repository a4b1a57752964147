package instances

import (
	"context"
	"errors"

	"github.com/theappliance/appliance/appliance/cgroups"
	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/store"
)

// A project's server runs in its own cgroup (Config.Cgroups), held to its plan's memory and CPU
// (Config.Limits): the postmaster and every process it forks. Its pooler stays outside, in the appliance's
// group: one small single-threaded process whose memory its pool sizes bound. The group is set (limits
// written, the postmaster's process tree moved in) when the instance is watched (after a provision, on
// adopt by a restarted appliance, after a restart or a restore), when the supervisor starts it again, and
// after its settings are applied (a plan change); it is removed with the instance. Spares, which belong to
// no project yet, are not held. Where the machine has no usable cgroups, nothing is held (Open warned
// once).

// limits are the project's limits (none without Config.Limits).
func (m *Manager) limits(prj *store.Project) cgroups.Limits {
	if m.cfg.Limits == nil || prj == nil {
		return cgroups.Limits{}
	}
	return m.cfg.Limits(prj)
}

// hold puts the instance's running server and its processes in its group with the limits l, remembered
// for the supervisor's restarts. A failure is logged: the server runs on, not held.
func (m *Manager) hold(id string, pgi *postgres.Instance, l cgroups.Limits) {
	if m.cfg.Cgroups == nil {
		return
	}
	m.held.Store(id, l)
	pid, running, err := pgi.Status()
	if err != nil || !running {
		pid = 0 // the limits are set; the next start is moved in
	}
	if err := m.cfg.Cgroups.Limit(id, l, pid); err != nil && !errors.Is(err, cgroups.ErrNotSupported) {
		m.cfg.Log.Error("cgroups: the instance's memory and CPU are not held", "instance", id, "err", err)
	}
}

// heldLimits are the limits the instance was last held to (false: never held by this process).
func (m *Manager) heldLimits(id string) (cgroups.Limits, bool) {
	v, ok := m.held.Load(id)
	if !ok {
		return cgroups.Limits{}, false
	}
	return v.(cgroups.Limits), true
}

// watchHeld watches a server whose starts by the supervisor are moved into its group (with the limits it
// was last held to).
func (m *Manager) watchHeld(id string, pgi *postgres.Instance) error {
	if m.cfg.Cgroups == nil {
		return m.cfg.Supervisor.Watch(id, pgi)
	}
	if l, ok := m.heldLimits(id); ok {
		m.hold(id, pgi, l)
	}
	return m.cfg.Supervisor.Watch(id, heldInstance{pgi, m, id})
}

// heldInstance is a server the supervisor starts into its group.
type heldInstance struct {
	*postgres.Instance
	m  *Manager
	id string
}

// Start starts the server and moves it (its postmaster, and the processes it forked meanwhile) into its group.
func (h heldInstance) Start(ctx context.Context, ex daemon.ExecFunc) error {
	if err := h.Instance.Start(ctx, ex); err != nil {
		return err
	}
	if l, ok := h.m.heldLimits(h.id); ok {
		h.m.hold(h.id, h.Instance, l)
	}
	return nil
}

// removeGroup removes the instance's group (its server stopped). A group the kernel refuses to remove (a
// process still in it) is logged, not a failure of the removal: the appliance's shutdown removes the groups
// left empty.
func (m *Manager) removeGroup(id string) {
	m.held.Delete(id)
	if m.cfg.Cgroups == nil {
		return
	}
	if err := m.cfg.Cgroups.Remove(id); err != nil && !errors.Is(err, cgroups.ErrNotSupported) {
		m.cfg.Log.Warn("cgroups: the removed instance's group stays", "instance", id, "err", err)
	}
}
