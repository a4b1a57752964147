package instances

import (
	"context"

	"github.com/jackc/pgx/v5"
)

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

// KeepSpareConn keeps conn, an admin session of the spare instanceID, for the claim (TakeSpareConn).
func (m *Manager) KeepSpareConn(instanceID string, conn *pgx.Conn) {
	m.spareConns.Store(instanceID, conn)
}
