package instances

import (
	"context"
	"errors"

	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/store"
)

// Stop takes the instance and its pooler from supervision and stops both (fast: sessions end), keeping
// their data: a suspended organization's project. Stopping a stopped instance does nothing.
func (m *Manager) Stop(ctx context.Context, exec daemon.ExecFunc, inst *store.Instance, prj *store.Project) error {
	m.Unwatch(inst)
	var errs []error
	if inst.PooledPort != 0 {
		errs = append(errs, m.Pooler(inst, prj).Stop(ctx, exec, daemon.StopFast))
	}
	errs = append(errs, m.Instance(inst).Stop(ctx, exec, daemon.StopFast))
	return errors.Join(errs...)
}

// Start starts a stopped instance's server and its pooler, waits until the server accepts connections, and
// puts both under supervision again (Stop's undoing). A running instance is left as it is.
func (m *Manager) Start(ctx context.Context, exec daemon.ExecFunc, inst *store.Instance, prj *store.Project) error {
	if err := m.Instance(inst).Start(ctx, exec); err != nil {
		return err
	}
	if inst.PooledPort != 0 {
		if err := m.Pooler(inst, prj).Start(ctx, exec); err != nil {
			return err
		}
	}
	return m.Watch(inst, prj)
}
