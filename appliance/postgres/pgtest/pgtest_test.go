package pgtest_test

import (
	"context"
	"testing"

	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/appliance/postgres/pgtest"
	"github.com/theappliance/appliance/appliance/testtools"
)

func TestMain(m *testing.M) { testtools.Main(m) }

// TestTenant: a tenant is a non-superuser owning its database, over TLS; the admin is the superuser.
func TestTenant(t *testing.T) {
	t.Parallel()
	s := pgtest.Start(t, postgres.Settings{})
	db, role, conn := s.Tenant(t)
	var user, dbname string
	var super, ssl bool
	if err := conn.QueryRow(context.Background(), `SELECT current_user, current_database(), r.rolsuper, s.ssl
		FROM pg_roles r, pg_stat_ssl s WHERE r.rolname = current_user AND s.pid = pg_backend_pid()`).Scan(&user, &dbname, &super, &ssl); err != nil {
		t.Fatal(err)
	}
	if user != role || dbname != db || super || !ssl {
		t.Errorf("tenant session: user %q db %q superuser %v ssl %v; want %q %q false true", user, dbname, super, ssl, role, db)
	}
	if err := s.Admin(t, db).QueryRow(context.Background(), "SELECT current_user, r.rolsuper FROM pg_roles r WHERE r.rolname = current_user").Scan(&user, &super); err != nil {
		t.Fatal(err)
	}
	if user != postgres.AdminRole || !super {
		t.Errorf("admin session: user %q superuser %v", user, super)
	}
	second := s.Connect(t, s.TenantConfig(t, db, role))
	if err := second.Ping(context.Background()); err != nil {
		t.Error(err)
	}
}
