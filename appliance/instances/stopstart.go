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

// Start starts a stopped instance's server and its pooler (at the same time: PgBouncer connects to the
// server only when a client comes), waits until the server accepts connections and the pooler listens, and
// puts both under supervision again (Stop's undoing). A running instance is left as it is.
func (m *Manager) Start(ctx context.Context, exec daemon.ExecFunc, inst *store.Instance, prj *store.Project) error {
	pooler := make(chan error, 1)
	if inst.PooledPort != 0 {
		go func() { pooler <- m.Pooler(inst, prj).Start(ctx, exec) }()
	} else {
		pooler <- nil
	}
	err := m.Instance(inst).Start(ctx, exec)
	if err = errors.Join(err, <-pooler); err != nil {
		return err
	}
	return m.Watch(inst, prj)
}
