package pgstat_test

import (
	"context"
	"testing"

	"github.com/theappliance/appliance/appliance/pgstat"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/appliance/postgres/pgtest"
)

// BenchmarkProcs measures a sweep's /proc pass and one instance's usage (a server with three idle
// sessions besides its own processes).
func BenchmarkProcs(b *testing.B) {
	s := pgtest.Start(b, postgres.Settings{})
	for range 3 {
		s.Tenant(b)
	}
	pid, err := pgstat.PostmasterPID(s.Instance.DataDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Run("ReadProcs", func(b *testing.B) {
		for b.Loop() {
			if _, err := pgstat.ReadProcs(); err != nil {
				b.Fatal(err)
			}
		}
	})
	p, err := pgstat.ReadProcs()
	if err != nil {
		b.Fatal(err)
	}
	b.Run("Usage", func(b *testing.B) {
		for b.Loop() {
			if u := p.Usage(pid); u.MemBytes == 0 {
				b.Fatal("no memory")
			}
		}
	})
	b.Run("Measure", func(b *testing.B) {
		for b.Loop() {
			if _, err := pgstat.Measure(pid, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Measure+memory", func(b *testing.B) {
		for b.Loop() {
			if u, err := pgstat.Measure(pid, &pgstat.Memory{}); err != nil || u.MemBytes == 0 {
				b.Fatal(u, err)
			}
		}
	})
	b.Run("ReadProcs+Usage", func(b *testing.B) {
		for b.Loop() {
			p, err := pgstat.ReadProcs()
			if err != nil {
				b.Fatal(err)
			}
			p.Usage(pid)
		}
	})
}

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
