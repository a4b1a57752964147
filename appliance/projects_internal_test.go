package appliance

import "testing"

// TestIdentifierAvoidsReservedNames: a project named like a database PostgreSQL or PgBouncer keep for
// themselves gets another database and role name (PgBouncer answers a client asking for the database
// "pgbouncer" with its admin console, so such a project could never be reached on its pooled port).
func TestIdentifierAvoidsReservedNames(t *testing.T) {
	for name, want := range map[string]string{"pgbouncer": "pgbouncer_db", "PgBouncer": "pgbouncer_db", "postgres": "postgres_db",
		"template1": "template1_db", "shop": "shop"} {
		if got, err := instanceIdent(name); err != nil || got != want {
			t.Errorf("instanceIdent(%q) = %q, %v; want %q", name, got, err, want)
		}
	}
}
