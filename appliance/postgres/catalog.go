package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ExecCatalog runs a statement that rewrites a shared catalog row: a GRANT or ALTER on a database (its
// pg_database row) or an ALTER ROLE (its pg_authid row). PostgreSQL does not lock those rows: when another
// session (the storage guard's, a role's creation) updated the same row meanwhile, the statement fails
// with "tuple concurrently updated" (XX000) and nothing of it applied; run again, it sees the committed
// row. It tries up to five times.
func ExecCatalog(ctx context.Context, conn *pgx.Conn, q string) error {
	var err error
	for range 5 {
		_, err = conn.Exec(ctx, q)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "XX000" || pe.Message != "tuple concurrently updated" {
			return err
		}
	}
	return err
}
