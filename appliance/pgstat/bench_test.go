package pgstat_test

import (
	"context"
	"testing"

	"github.com/theappliance/appliance/appliance/pgstat"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/appliance/postgres/pgtest"
)

// BenchmarkReadCounters measures one reading on an admin session, pg_stat_statements installed.
func BenchmarkReadCounters(b *testing.B) {
	s := pgtest.Start(b, postgres.Settings{})
	db, _, _ := s.Tenant(b)
	admin := s.Admin(b, db)
	if _, err := admin.Exec(context.Background(), "CREATE EXTENSION pg_stat_statements"); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := pgstat.ReadCounters(context.Background(), admin, postgres.AdminRole); err != nil {
			b.Fatal(err)
		}
	}
}
