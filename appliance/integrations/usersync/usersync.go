// Package usersync writes an identity provider's users into a table of the project's database: the table
// the integrations area's user sync fills (issue 30), by default auth_sync.users.
//
// The table has one row per live user: id (the provider's user id, the primary key), email, first_name,
// last_name, created_at, updated_at (the provider's times), raw (the provider's JSON for the user, whole)
// and source_at, the time of the change the row holds, which orders writes: a write older than the row's
// source_at changes nothing. Deleted users leave the table; their deletions are remembered as tombstones
// in a second table beside it, <name>_tombstones (id, source_at), so that an update older than the
// deletion, delivered after it (webhooks arrive in any order), does not bring the user back, while the
// users table itself holds only live users, ready to be joined against. A write newer than a tombstone
// (the provider re-created the id) removes the tombstone.
//
// Every write of one call runs in one transaction, after taking a transaction-scoped advisory lock per
// user id (in a fixed order), so that concurrent calls (a backfill racing webhook events) serialize per
// user. Values are bound, identifiers quoted.
package usersync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance/integrations/provider"
)

// The table's default place.
const (
	DefaultSchema = "auth_sync"
	DefaultName   = "users"
)

// TombstoneSuffix names the tombstones' table beside the users' one.
const TombstoneSuffix = "_tombstones"

// identifier: a lowercase PostgreSQL name people can write unquoted; the table's name leaves room for the
// tombstones' suffix within PostgreSQL's 63 bytes.
var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// Table is where a directory's users are synced: Schema.Name and, beside it, Schema.Name_tombstones.
type Table struct {
	Schema, Name string
}

// Validate checks the schema's and the table's names.
func (t Table) Validate() error {
	if err := checkIdentifier("schema", t.Schema, 63); err != nil {
		return err
	}
	if strings.HasPrefix(t.Schema, "pg_") || t.Schema == "information_schema" {
		return fmt.Errorf("schema %q is reserved by PostgreSQL", t.Schema)
	}
	return checkIdentifier("table", t.Name, 63-len(TombstoneSuffix))
}

func checkIdentifier(field, name string, max int) error {
	if name == "" {
		return fmt.Errorf("%s must not be empty", field)
	}
	if len(name) > max {
		return fmt.Errorf("%s must be at most %d characters", field, max)
	}
	if !identifier.MatchString(name) {
		return fmt.Errorf("%s must be a lowercase identifier: a letter or _, then letters, digits or _", field)
	}
	return nil
}

func (t Table) users() string {
	return pgx.Identifier{t.Schema, t.Name}.Sanitize()
}

func (t Table) tombstones() string {
	return pgx.Identifier{t.Schema, t.Name + TombstoneSuffix}.Sanitize()
}

// lockSpace is the advisory lock's first key: the table's, so that two tables' writers do not wait for
// each other.
func (t Table) lockSpace() int32 {
	return hash32(t.Schema + "." + t.Name)
}

func hash32(s string) int32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return int32(h.Sum32())
}

// columns are the users table's columns and their types, as Ensure creates them and checks them.
var columns = []struct{ name, typ string }{
	{"id", "text"},
	{"email", "text"},
	{"first_name", "text"},
	{"last_name", "text"},
	{"created_at", "timestamp with time zone"},
	{"updated_at", "timestamp with time zone"},
	{"raw", "jsonb"},
	{"source_at", "timestamp with time zone"},
}

// Ensure creates the schema (when missing), the users table and the tombstones table, owned by owner (the
// project's role; an existing schema keeps its owner), and checks that an existing users table has the columns the sync writes. Idempotent;
// concurrent calls wait for each other.
func (t Table) Ensure(ctx context.Context, conn *pgx.Conn, owner string) error {
	if err := t.Validate(); err != nil {
		return err
	}
	if owner == "" {
		return errors.New("owner role must not be empty")
	}
	role := pgx.Identifier{owner}.Sanitize()
	schema := pgx.Identifier{t.Schema}.Sanitize()
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		// Keyed by the schema: two tables' creations in one new schema wait for each other.
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, 0)", hash32("schema "+t.Schema)); err != nil {
			return fmt.Errorf("lock the sync table's creation: %w", err)
		}
		// A schema the sync creates is the project role's; an existing one (the project's own, or public)
		// keeps its owner.
		var exists bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", t.Schema).Scan(&exists); err != nil {
			return fmt.Errorf("look for schema %s: %w", t.Schema, err)
		}
		var stmts []string
		if !exists {
			stmts = append(stmts, "CREATE SCHEMA "+schema+" AUTHORIZATION "+role)
		}
		stmts = append(stmts,
			"CREATE TABLE IF NOT EXISTS "+t.users()+` (
	id text PRIMARY KEY,
	email text,
	first_name text,
	last_name text,
	created_at timestamptz,
	updated_at timestamptz,
	raw jsonb,
	source_at timestamptz NOT NULL
)`,
			"CREATE TABLE IF NOT EXISTS "+t.tombstones()+" (id text PRIMARY KEY, source_at timestamptz NOT NULL)",
			"ALTER TABLE "+t.users()+" OWNER TO "+role,
			"ALTER TABLE "+t.tombstones()+" OWNER TO "+role,
		)
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s); err != nil {
				return fmt.Errorf("create the sync table %s.%s: %w", t.Schema, t.Name, err)
			}
		}
		rows, err := tx.Query(ctx, `SELECT column_name::text, data_type::text FROM information_schema.columns
WHERE table_schema = $1 AND table_name = $2`, t.Schema, t.Name)
		if err != nil {
			return fmt.Errorf("read the sync table's columns: %w", err)
		}
		have := map[string]string{}
		var name, typ string
		_, err = pgx.ForEachRow(rows, []any{&name, &typ}, func() error {
			have[name] = typ
			return nil
		})
		if err != nil {
			return fmt.Errorf("read the sync table's columns: %w", err)
		}
		for _, c := range columns {
			if have[c.name] != c.typ {
				return fmt.Errorf("table %s.%s exists without the sync's column %s %s: drop or rename it, or choose another table", t.Schema, t.Name, c.name, c.typ)
			}
		}
		return nil
	})
}

// Backfill writes a page of the provider's user list. Each user's row is ordered by the user's UpdatedAt
// (the provider's clock, the one its events carry), or by at when the provider gave no update time: a
// row or a tombstone as new or newer is kept.
func (t Table) Backfill(ctx context.Context, conn *pgx.Conn, users []provider.User, at time.Time) error {
	evs := make([]provider.UserEvent, len(users))
	for i, u := range users {
		evs[i] = provider.UserEvent{User: u, At: u.UpdatedAt}
		if u.UpdatedAt.IsZero() {
			evs[i].At = at
		}
	}
	return t.apply(ctx, conn, evs)
}

// Apply writes events in one transaction, each ordered by its At (its User.UpdatedAt when At is zero): an
// update (created or updated) older than the user's row or tombstone changes nothing; a deletion removes
// the row and leaves a tombstone, unless the row is newer (then neither). At equal times a deletion wins
// over an update, and of two updates the one applied last.
func (t Table) Apply(ctx context.Context, conn *pgx.Conn, evs ...provider.UserEvent) error {
	return t.apply(ctx, conn, evs)
}

func (t Table) apply(ctx context.Context, conn *pgx.Conn, evs []provider.UserEvent) error {
	if err := t.Validate(); err != nil {
		return err
	}
	if len(evs) == 0 {
		return nil
	}
	var keys []int32
	for i, ev := range evs {
		if ev.User.ID == "" {
			return fmt.Errorf("event %d has no user id", i)
		}
		if ev.At.IsZero() && ev.User.UpdatedAt.IsZero() {
			return fmt.Errorf("event %d (user %s) has no time to order it by", i, ev.User.ID)
		}
		keys = append(keys, hash32(ev.User.ID))
	}
	// One lock order for every caller: the keys sorted, so that two calls never wait for each other in a
	// cycle.
	slices.Sort(keys)
	keys = slices.Compact(keys)

	upsert := "INSERT INTO " + t.users() + ` AS u (id, email, first_name, last_name, created_at, updated_at, raw, source_at)
SELECT $1::text, $2::text, $3::text, $4::text, $5::timestamptz, $6::timestamptz, $7::jsonb, $8::timestamptz
WHERE NOT EXISTS (SELECT 1 FROM ` + t.tombstones() + ` WHERE id = $1 AND source_at >= $8)
ON CONFLICT (id) DO UPDATE SET email = excluded.email, first_name = excluded.first_name,
	last_name = excluded.last_name, created_at = excluded.created_at, updated_at = excluded.updated_at,
	raw = excluded.raw, source_at = excluded.source_at
WHERE u.source_at <= excluded.source_at`
	clearTomb := "DELETE FROM " + t.tombstones() + " WHERE id = $1 AND source_at < $2"
	del := "DELETE FROM " + t.users() + " WHERE id = $1 AND source_at <= $2"
	tomb := "INSERT INTO " + t.tombstones() + ` AS t (id, source_at) SELECT $1::text, $2::timestamptz
WHERE NOT EXISTS (SELECT 1 FROM ` + t.users() + ` WHERE id = $1 AND source_at > $2)
ON CONFLICT (id) DO UPDATE SET source_at = greatest(t.source_at, excluded.source_at)`

	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		space := t.lockSpace()
		for _, k := range keys {
			b.Queue("SELECT pg_advisory_xact_lock($1, $2)", space, k)
		}
		for _, ev := range evs {
			at := ev.At
			if at.IsZero() {
				at = ev.User.UpdatedAt
			}
			u := ev.User
			if ev.Deleted {
				b.Queue(del, u.ID, at)
				b.Queue(tomb, u.ID, at)
				continue
			}
			raw, err := rawJSON(u.Raw)
			if err != nil {
				return fmt.Errorf("user %s: %w", u.ID, err)
			}
			b.Queue(upsert, u.ID, nullable(u.Email), nullable(u.FirstName), nullable(u.LastName),
				nullTime(u.CreatedAt), nullTime(u.UpdatedAt), raw, at)
			b.Queue(clearTomb, u.ID, at)
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("write users to %s.%s: %w", t.Schema, t.Name, err)
		}
		return nil
	})
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// rawJSON binds the user's JSON as jsonb (text, cast by the column): nil when absent, an error when it is
// not JSON.
func rawJSON(raw json.RawMessage) (*string, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	if !json.Valid(raw) {
		return nil, errors.New("raw is not valid JSON")
	}
	s := string(raw)
	return &s, nil
}

// Config is the user sync's part of a directory provider's config.
type Config struct {
	Schema string `json:"schema"`
	Table  string `json:"table"`
}

// tableOf is the config's table, defaults filled in.
func tableOf(c Config) Table {
	t := Table{Schema: c.Schema, Name: c.Table}
	if t.Schema == "" {
		t.Schema = DefaultSchema
	}
	if t.Name == "" {
		t.Name = DefaultName
	}
	return t
}

// ValidateConfig is a directory provider's ValidateConfig: {"schema", "table"} (nil or {} in: the
// defaults), unknown fields refused, the names checked; it returns the config with the defaults filled.
func ValidateConfig(raw json.RawMessage) (json.RawMessage, error) {
	var c Config
	if len(raw) > 0 && string(raw) != "null" {
		d := json.NewDecoder(strings.NewReader(string(raw)))
		d.DisallowUnknownFields()
		if err := d.Decode(&c); err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		if d.More() {
			return nil, errors.New("config: one JSON object expected")
		}
	}
	t := tableOf(c)
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return json.Marshal(Config{Schema: t.Schema, Table: t.Name})
}

// TableOf is the table a stored config (as ValidateConfig returned it) names; other fields are ignored.
func TableOf(raw json.RawMessage) (Table, error) {
	var c Config
	if len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &c); err != nil {
			return Table{}, fmt.Errorf("config: %w", err)
		}
	}
	t := tableOf(c)
	return t, t.Validate()
}
