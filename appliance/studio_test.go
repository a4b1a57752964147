package appliance_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/studio"
	"github.com/theappliance/appliance/store"
)

// studioEnv is an appliance with one active project whose studio the subtests use.
type studioEnv struct {
	e   *appliancetest.Env
	p   *appliance.Principal
	prj *store.Project
}

func (s *studioEnv) sql(t *testing.T, q string) (*appliance.SQLResultResponse, error) {
	t.Helper()
	return s.e.Svc.Studio().RunSQL(t.Context(), s.p, s.prj.ID, &appliance.SQLRequest{Query: q})
}

func (s *studioEnv) mustSQL(t *testing.T, q string) map[string]json.RawMessage {
	t.Helper()
	res, err := s.sql(t, q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	if len(res.Result.Rows) == 0 {
		return nil
	}
	return res.Result.Rows[0]
}

func sqlFields(t *testing.T, err error) *appliance.Error {
	t.Helper()
	var ae *appliance.Error
	if !errors.As(err, &ae) {
		t.Fatalf("want an API error, got %v", err)
	}
	return ae
}

// noBackendRunning waits until no session of the project's server runs a statement containing marker.
func noBackendRunning(t *testing.T, s *studioEnv, marker string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := 0
		err := s.e.Svc.AdminQueryRow(t.Context(), s.prj.ID, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%'||$1||'%' AND pid <> pg_backend_pid()", []any{marker}, &n)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions still run %q", n, marker)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestStudio: the console and the table editor, as the project's own role, against a real server.
func TestStudio(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	s := &studioEnv{e: e, p: p, prj: provision(t, e, p, "studio", "development")}

	t.Run("types", func(t *testing.T) {
		cases := []struct{ expr, want string }{
			{"NULL::int", `null`},
			{"true", `true`},
			{"false", `false`},
			{"42::smallint", `42`},
			{"(-2147483648)::int", `-2147483648`},
			{"9223372036854775807::bigint", `"9223372036854775807"`},
			{"12345678901234567890.000000000000000001::numeric", `"12345678901234567890.000000000000000001"`},
			{"'NaN'::numeric", `"NaN"`},
			{"1.5::real", `1.5`},
			{"0.1::double precision", `0.1`},
			{"'Infinity'::float8", `"Infinity"`},
			{"'NaN'::float8", `"NaN"`},
			{"'héllo \"quoted\"'::text", `"héllo \"quoted\""`},
			{"'abc'::varchar(5)", `"abc"`},
			{"'a'::char(3)", `"a  "`},
			{`'{"a": [1, 2.50, {"b": null}], "big": 12345678901234567890}'::json`, `{"a": [1, 2.50, {"b": null}], "big": 12345678901234567890}`},
			{`'{"b": 1, "a": "x"}'::jsonb`, `{"a": "x", "b": 1}`},
			{`'\x00ff10'::bytea`, `"\\x00ff10"`},
			{"'2024-05-01 12:00:00.5+02'::timestamptz", `"2024-05-01T10:00:00.5Z"`},
			{"'2024-05-01 12:00:00'::timestamp", `"2024-05-01T12:00:00"`},
			{"'infinity'::timestamptz", `"infinity"`},
			{"'2024-05-01'::date", `"2024-05-01"`},
			{"'13:14:15.25'::time", `"13:14:15.25"`},
			{"'1 year 2 months 3 days 04:05:06.5'::interval", `"P1Y2M3DT4H5M6.5S"`},
			{"'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid", `"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"`},
			{"'10.1.2.3/8'::inet", `"10.1.2.3/8"`},
			{"ARRAY[1, NULL, 3]", `[1,null,3]`},
			{"ARRAY[[1, 2], [3, 4]]::bigint[]", `[["1","2"],["3","4"]]`},
			{`ARRAY['a,b', 'say "hi"', 'back\slash', 'NULL', '', ' sp ']`, `["a,b","say \"hi\"","back\\slash","NULL",""," sp "]`},
			{"'{}'::int[]", `[]`},
			{"'[0:1]={7,8}'::int[]", `[7,8]`},
			{"ARRAY[true, false]", `[true,false]`},
			{`ARRAY['{"x":1}'::jsonb]`, `[{"x": 1}]`},
			{"ARRAY['2024-05-01 00:00:00+00'::timestamptz]", `["2024-05-01T00:00:00Z"]`},
			{"ARRAY[1.50::numeric]", `["1.50"]`},
			{"'(1,2)'::point", `"(1,2)"`},
			{"int4range(1, 5)", `"[1,5)"`},
			{"ROW(1, 'a')", `"(1,a)"`},
			{"'12.34'::money", `"$12.34"`},
		}
		for _, c := range cases {
			row := s.mustSQL(t, "SELECT "+c.expr+" AS v")
			var got, want any
			if err := json.Unmarshal(row["v"], &got); err != nil {
				t.Errorf("%s: invalid JSON %s", c.expr, row["v"])
				continue
			}
			json.Unmarshal([]byte(c.want), &want)
			if gb, _ := json.Marshal(got); string(gb) != mustJSON(want) || strings.Contains(c.want, "12345678901234567890}") && !strings.Contains(string(row["v"]), "12345678901234567890") {
				t.Errorf("%s: got %s, want %s", c.expr, row["v"], c.want)
			}
		}
		// An enum is its text, and the column's type is named.
		res, err := s.sql(t, "CREATE TYPE mood AS ENUM ('ok', 'sad'); SELECT 'ok'::mood AS m, 1 AS n")
		if err != nil {
			t.Fatal(err)
		}
		if string(res.Result.Rows[0]["m"]) != `"ok"` || res.Result.ColumnTypes[0] != "mood" || res.Result.ColumnTypes[1] != "int4" {
			t.Fatalf("enum: %s %v", res.Result.Rows[0]["m"], res.Result.ColumnTypes)
		}
	})

	t.Run("statements and duplicate names", func(t *testing.T) {
		res, err := s.sql(t, "CREATE TABLE notes (id int PRIMARY KEY, body text); INSERT INTO notes VALUES (1, 'a'), (2, 'b'); SELECT 1 AS x, 2 AS x, 3 AS x_2")
		if err != nil {
			t.Fatal(err)
		}
		r := res.Result
		if r.Statements != 3 || strings.Join(r.Columns, ",") != "x,x_2,x_2_2" || r.RowCount != 1 || string(r.Rows[0]["x_2"]) != "2" {
			t.Fatalf("result: %+v", r)
		}
		res, err = s.sql(t, "UPDATE notes SET body = 'c'")
		if err != nil || res.Result.RowCount != 2 || res.Result.Command != "UPDATE 2" || len(res.Result.Columns) != 0 {
			t.Fatalf("update: %+v %v", res, err)
		}
		// A failing statement undoes the ones before it in the same text.
		_, err = s.sql(t, "INSERT INTO notes VALUES (3, 'c'); SELECT 1/0")
		if ae := sqlFields(t, err); ae.Kind != appliance.KindInvalid || ae.Fields["sqlstate"] != "22012" {
			t.Fatalf("division by zero: %+v", ae)
		}
		if row := s.mustSQL(t, "SELECT count(*) AS n FROM notes"); string(row["n"]) != `"2"` {
			t.Fatalf("the insert before the error stayed: %s", row["n"])
		}
		_, err = s.sql(t, "SELECT id FROM notes WHERE nope = 1")
		if ae := sqlFields(t, err); ae.Fields["sqlstate"] != "42703" || ae.Fields["position"] != int32(28) || !strings.Contains(ae.Msg, "nope") {
			t.Fatalf("unknown column: %+v", ae)
		}
		_, err = s.sql(t, "  ")
		wantKind(t, err, appliance.KindInvalid)
		_, err = s.sql(t, "COPY notes FROM STDIN")
		wantKind(t, err, appliance.KindInvalid)
		if res, err := s.sql(t, "COPY notes TO STDOUT"); err != nil || res.Result.Command != "COPY 2" {
			t.Fatalf("copy to stdout: %+v %v", res, err)
		}
		_, err = s.sql(t, "SELECT '"+strings.Repeat("x", appliance.MaxQueryBytes)+"'")
		wantKind(t, err, appliance.KindTooLarge)
	})

	t.Run("caps", func(t *testing.T) {
		res, err := s.sql(t, "SELECT g, repeat('x', 10) AS pad FROM generate_series(1, 25000) g")
		if err != nil {
			t.Fatal(err)
		}
		if r := res.Result; !r.Truncated || len(r.Rows) != 10_000 || r.RowCount != 25_000 {
			t.Fatalf("row cap: truncated=%v rows=%d row_count=%d", r.Truncated, len(r.Rows), r.RowCount)
		}
		res, err = s.sql(t, "SELECT repeat('y', 1000000) AS big FROM generate_series(1, 20)")
		if err != nil {
			t.Fatal(err)
		}
		if r := res.Result; !r.Truncated || len(r.Rows) >= 10 || r.RowCount != 20 {
			t.Fatalf("size cap: truncated=%v rows=%d row_count=%d", r.Truncated, len(r.Rows), r.RowCount)
		}
		// The cap is on the JSON kept: a value that JSON escapes (\u0001 for each byte) counts at its JSON size.
		res, err = s.sql(t, "SELECT repeat(chr(1), 2000000) AS esc FROM generate_series(1, 5)")
		if err != nil {
			t.Fatal(err)
		}
		kept := 0
		for _, row := range res.Result.Rows {
			kept += len(row["esc"])
		}
		if r := res.Result; !r.Truncated || kept > studio.DefaultCaps.Bytes || r.RowCount != 5 {
			t.Fatalf("escaped size cap: truncated=%v rows=%d (%d bytes of JSON) row_count=%d", r.Truncated, len(r.Rows), kept, r.RowCount)
		}
	})

	t.Run("own role only", func(t *testing.T) {
		row := s.mustSQL(t, "SELECT current_user AS u, (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) AS su, current_database() AS db")
		if string(row["u"]) != mustJSON(s.prj.RoleName) || string(row["su"]) != "false" || string(row["db"]) != mustJSON(s.prj.DatabaseName) {
			t.Fatalf("session: %v", row)
		}
		for _, q := range []string{"SELECT * FROM pg_authid", "SELECT rolpassword FROM pg_authid", "SET ROLE postgres", "SET SESSION AUTHORIZATION postgres",
			"ALTER SYSTEM SET work_mem = '1GB'", "COPY (SELECT 1) TO '/tmp/x'", "SELECT pg_read_file('postgresql.conf')", "CREATE EXTENSION dblink"} {
			if _, err := s.sql(t, q); sqlFields(t, err).Kind != appliance.KindInvalid {
				t.Errorf("%s: %v", q, err)
			}
		}
		other := provision(t, e, p, "other", "development")
		if err := e.AdminExec(t, other.ID, "CREATE TABLE secret_rows (x int)"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.sql(t, "SELECT * FROM secret_rows"); sqlFields(t, err).Fields["sqlstate"] != "42P01" {
			t.Fatalf("another project's table: %v", err)
		}
		if row := s.mustSQL(t, "SELECT count(*) AS n FROM pg_database WHERE datname = "+quote(other.DatabaseName)); string(row["n"]) != `"0"` {
			t.Fatal("another project's database is on this project's server")
		}
	})

	t.Run("sessions start clean", func(t *testing.T) {
		if _, err := s.sql(t, "SET search_path = nowhere; SET TimeZone = 'Asia/Tokyo'; CREATE TEMP TABLE scratch (x int); SELECT pg_advisory_lock(42)"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.sql(t, "BEGIN; SELECT 1"); err != nil { // left open: the session is closed, not reused
			t.Fatal(err)
		}
		for range 2 * 4 {
			row := s.mustSQL(t, "SELECT current_setting('search_path') AS sp, current_setting('TimeZone') AS tz, (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()) AS locks, to_regclass('pg_temp.scratch') AS tmp")
			if string(row["sp"]) != `"\"$user\", public"` || string(row["tz"]) != `"UTC"` || string(row["locks"]) != `"0"` || string(row["tmp"]) != "null" {
				t.Fatalf("a session kept an earlier run's state: %v", row)
			}
		}
	})

	t.Run("timeout and disconnect cancel on the server", func(t *testing.T) {
		short := "1s"
		if _, err := e.Svc.PatchProject(t.Context(), p, s.prj.ID, &appliance.PatchProjectRequest{StatementTimeout: &short}); err != nil {
			t.Fatal(err)
		}
		defer func() {
			zero := "0"
			e.Svc.PatchProject(context.Background(), p, s.prj.ID, &appliance.PatchProjectRequest{StatementTimeout: &zero})
		}()
		s.prj = e.Project(t, s.prj.ID)
		_, err := s.sql(t, "SELECT pg_sleep(3600) /* timeout-marker */")
		ae := sqlFields(t, err)
		if ae.Kind != appliance.KindInvalid || ae.Fields["sqlstate"] != "57014" || !strings.Contains(ae.Msg, "statement timeout of 1s") {
			t.Fatalf("timeout: %+v", ae)
		}
		noBackendRunning(t, s, "timeout-marker */")
		// A text that turns the timeout off is cancelled all the same (by the appliance, a little later).
		_, err = s.sql(t, "SET statement_timeout = 0; SELECT pg_sleep(3600) /* untimed-marker */")
		if ae := sqlFields(t, err); ae.Fields["sqlstate"] != "57014" || !strings.Contains(ae.Msg, "timeout") {
			t.Fatalf("untimed: %+v", ae)
		}
		noBackendRunning(t, s, "untimed-marker */")
		// A caller that goes away cancels its statement.
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			_, err := e.Svc.Studio().RunSQL(ctx, p, s.prj.ID, &appliance.SQLRequest{Query: "SET statement_timeout = 0; SELECT pg_sleep(3600) /* gone-marker */"})
			done <- err
		}()
		deadline := time.Now().Add(10 * time.Second)
		for {
			n := 0
			e.Svc.AdminQueryRow(t.Context(), s.prj.ID, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%gone-marker */%' AND pid <> pg_backend_pid()", nil, &n)
			if n > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the statement never started")
			}
			time.Sleep(20 * time.Millisecond)
		}
		cancel()
		if err := <-done; err == nil {
			t.Fatal("a cancelled run succeeded")
		}
		noBackendRunning(t, s, "gone-marker */")
	})

	t.Run("history", func(t *testing.T) {
		s.sql(t, "SELECT 'history-ok'")
		s.sql(t, "SELECT history_fails")
		h, err := e.Svc.Studio().SQLHistory(t.Context(), p, s.prj.ID, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(h.History) != 2 {
			t.Fatalf("history: %+v", h.History)
		}
		fail, ok := h.History[0], h.History[1]
		if fail.Success || !strings.Contains(fail.Error, "history_fails") || fail.Query != "SELECT history_fails" ||
			!ok.Success || ok.RowCount != 1 || ok.ActorKind == "" || ok.ActorID == "" || ok.ProjectID != s.prj.ID || ok.OrganizationID != s.prj.OrganizationID {
			t.Fatalf("history entries: %+v %+v", fail, ok)
		}
		long := "SELECT '" + strings.Repeat("é", 10_000) + "'"
		s.sql(t, long)
		h, _ = e.Svc.Studio().SQLHistory(t.Context(), p, s.prj.ID, 1)
		if q := h.History[0].Query; len([]rune(q)) != studio.HistoryQueryChars || !strings.HasSuffix(q, "…") {
			t.Fatalf("stored text: %d characters", len([]rune(q)))
		}
		audit, err := e.Svc.ListProjectAudit(t.Context(), p, s.prj.ID, appliance.AuditQuery{Limit: 5})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, a := range audit.AuditEvents {
			if a.Action == "project.sql.run" {
				found = true
				if strings.Contains(string(a.Metadata), "éé") || !strings.Contains(string(a.Metadata), "query_sha256") {
					t.Fatalf("audit metadata: %s", a.Metadata)
				}
			}
		}
		if !found {
			t.Fatal("no project.sql.run audit event")
		}
	})

	t.Run("history masks passwords", func(t *testing.T) {
		secrets := []string{"Hunter2-Studio-Secret", "Bare_Studio_Secret9", "Uri_Studio_Secret7"}
		texts := []string{
			"ALTER ROLE no_such_role_here PASSWORD 'Hunter2-Studio-Secret'",
			"CREATE ROLE studio_masked PASSWORD Bare_Studio_Secret9",
			"SELECT 'postgresql://app:Uri_Studio_Secret7@db/x' AS url",
		}
		for _, q := range texts {
			s.sql(t, q)
		}
		h, err := e.Svc.Studio().SQLHistory(t.Context(), p, s.prj.ID, len(texts))
		if err != nil {
			t.Fatal(err)
		}
		var stored []*store.SQLHistoryEntry
		if err := e.DB.View(func(tx *store.Tx) error {
			stored, err = store.SQLHistory.Lookup(tx, store.SQLHistoryByProject, s.prj.ID, store.Query{Newest: true, Limit: len(texts)})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if len(h.History) != len(texts) || len(stored) != len(texts) || !strings.Contains(h.History[0].Query, "postgresql://app:") ||
			h.History[1].Success || h.History[1].Error == "" {
			t.Fatalf("history: %+v", h.History)
		}
		storedWire := make([]*api.SQLHistoryEntry, len(stored))
		for i, en := range stored {
			storedWire[i] = (*api.SQLHistoryEntry)(en)
		}
		for _, entries := range [][]*api.SQLHistoryEntry{h.History, storedWire} {
			for _, en := range entries {
				for _, sec := range secrets {
					if strings.Contains(en.Query, sec) || strings.Contains(en.Error, sec) {
						t.Errorf("a history entry holds a password: %q / %q", en.Query, en.Error)
					}
				}
			}
		}
		// An entry an earlier version stored in clear is served masked.
		if err := e.DB.Update(func(tx *store.Tx) error {
			return store.SQLHistory.Put(tx, &store.SQLHistoryEntry{ID: "sqh_0clear", ProjectID: s.prj.ID, OrganizationID: s.prj.OrganizationID,
				Query: "ALTER ROLE app PASSWORD 'Hunter2-Studio-Secret'", Success: true, CreatedAt: time.Now()})
		}); err != nil {
			t.Fatal(err)
		}
		h, err = e.Svc.Studio().SQLHistory(t.Context(), p, s.prj.ID, 200)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(h.History, func(en *api.SQLHistoryEntry) bool { return en.ID == "sqh_0clear" })
		if i < 0 || strings.Contains(h.History[i].Query, "Hunter2") || !strings.Contains(h.History[i].Query, "PASSWORD") {
			t.Fatalf("an entry stored in clear is served as %+v", h.History[max(i, 0)])
		}
		audit, err := e.Svc.ListProjectAudit(t.Context(), p, s.prj.ID, appliance.AuditQuery{Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range audit.AuditEvents {
			for _, q := range texts {
				sum := sha256.Sum256([]byte(q))
				if strings.Contains(string(a.Metadata), hex.EncodeToString(sum[:])) {
					t.Errorf("an audit event holds the hash of a clear-text password: %s", a.Metadata)
				}
			}
		}
	})

	t.Run("changes are recorded before the answer", func(t *testing.T) {
		text := "CREATE TABLE crash_rows (x int); INSERT INTO crash_rows VALUES (1) /* crash-marker */"
		if _, err := s.sql(t, text); err != nil {
			t.Fatal(err)
		}
		// The crash: the metadata store as it is on disk at the moment of the answer, nothing flushed.
		db := crashCopy(t, e)
		var hist []*store.SQLHistoryEntry
		var audit []*store.AuditEvent
		read := func() {
			t.Helper()
			if err := db.View(func(tx *store.Tx) error {
				var err error
				if hist, err = store.SQLHistory.Lookup(tx, store.SQLHistoryByProject, s.prj.ID, store.Query{}); err != nil {
					return err
				}
				audit, err = store.AuditEvents.Lookup(tx, store.AuditEventsByProject, s.prj.ID, store.Query{})
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
		read()
		if !slices.ContainsFunc(hist, func(h *store.SQLHistoryEntry) bool { return h.Query == text && h.Success }) {
			t.Fatal("the history entry of a run that changed data was lost in the crash")
		}
		sum := sha256.Sum256([]byte(text))
		if !slices.ContainsFunc(audit, func(a *store.AuditEvent) bool {
			return a.Action == "project.sql.run" && strings.Contains(string(a.Metadata), hex.EncodeToString(sum[:]))
		}) {
			t.Fatal("the audit event of a run that changed data was lost in the crash")
		}
		if _, err := e.Svc.Studio().InsertRows(t.Context(), p, s.prj.ID, "public", "crash_rows", &appliance.InsertRowsRequest{Rows: []map[string]json.RawMessage{{"x": json.RawMessage("2")}}}); err != nil {
			t.Fatal(err)
		}
		db = crashCopy(t, e)
		read()
		if !slices.ContainsFunc(audit, func(a *store.AuditEvent) bool { return a.Action == "project.rows.insert" }) {
			t.Fatal("the audit event of a row insert was lost in the crash")
		}
	})

	t.Run("tables", func(t *testing.T) {
		s.mustSQL(t, `CREATE TABLE items (b int, a int, name text NOT NULL DEFAULT 'none', tags text[], doc jsonb, PRIMARY KEY (a, b));
CREATE VIEW item_names AS SELECT name FROM items; CREATE MATERIALIZED VIEW item_count AS SELECT count(*) FROM items;
CREATE TABLE events (at date NOT NULL, n int) PARTITION BY RANGE (at); CREATE TABLE events_2026 PARTITION OF events FOR VALUES FROM ('2026-01-01') TO ('2027-01-01');
CREATE TABLE heap (n int); INSERT INTO heap SELECT generate_series(1, 5)`)
		// An extension's views (pg_stat_statements in public) are the extension's, not the project's tables.
		if err := e.Svc.AdminExec(t.Context(), s.prj.ID, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements SCHEMA public"); err != nil {
			t.Fatal(err)
		}
		tables, err := e.Svc.Studio().ListTables(t.Context(), p, s.prj.ID)
		if err != nil {
			t.Fatal(err)
		}
		kinds := map[string]string{}
		for _, tb := range tables.Tables {
			if tb.Schema == "public" {
				kinds[tb.Table] = tb.Type
			}
			if tb.Schema == "pg_catalog" || tb.Schema == "information_schema" {
				t.Fatalf("a system table is listed: %+v", tb)
			}
		}
		if kinds["items"] != "table" || kinds["item_names"] != "view" || kinds["item_count"] != "materialized view" || kinds["events"] != "partitioned table" || kinds["events_2026"] != "" ||
			kinds["pg_stat_statements"] != "" || kinds["pg_stat_statements_info"] != "" {
			t.Fatalf("tables: %v", kinds)
		}
		cols, err := e.Svc.Studio().TableColumns(t.Context(), p, s.prj.ID, "public", "items")
		if err != nil {
			t.Fatal(err)
		}
		c := cols.Columns
		if len(c) != 5 || c[0].Name != "b" || !c[0].IsPrimaryKey || !c[1].IsPrimaryKey || c[2].IsPrimaryKey || c[2].Default == nil || *c[2].Default != "'none'::text" ||
			c[2].IsNullable || !c[3].IsNullable || c[3].DataType != "text[]" || c[4].Position != 5 || c[4].Default != nil {
			t.Fatalf("columns: %+v", c)
		}
		_, err = e.Svc.Studio().TableColumns(t.Context(), p, s.prj.ID, "public", "nope")
		wantKind(t, err, appliance.KindNotFound)
		_, err = e.Svc.Studio().TableColumns(t.Context(), p, s.prj.ID, "pg_catalog", "pg_authid")
		wantKind(t, err, appliance.KindNotFound)

		ins, err := e.Svc.Studio().InsertRows(t.Context(), p, s.prj.ID, "public", "items", &appliance.InsertRowsRequest{Rows: []map[string]json.RawMessage{
			{"a": json.RawMessage(`2`), "b": json.RawMessage(`1`), "name": json.RawMessage(`"two"`), "tags": json.RawMessage(`["x", "y,z", "q\"uote"]`), "doc": json.RawMessage(`{"k": [1, 2]}`)},
			{"a": json.RawMessage(`1`), "b": json.RawMessage(`9`)},
			{"a": json.RawMessage(`1`), "b": json.RawMessage(`3`), "tags": json.RawMessage(`null`)},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if ins.Result.RowsAffected != 3 || string(ins.Result.Rows[0]["tags"]) != `["x","y,z","q\"uote"]` || string(ins.Result.Rows[1]["name"]) != `"none"` || string(ins.Result.Rows[0]["doc"]) != `{"k": [1, 2]}` {
			t.Fatalf("insert: %+v", ins.Result)
		}
		read, err := e.Svc.Studio().ReadRows(t.Context(), p, s.prj.ID, "public", "items", &api.RowsQuery{Limit: 10, Offset: 0})
		if err != nil {
			t.Fatal(err)
		}
		var order []string
		for _, r := range read.Result.Rows {
			order = append(order, string(r["a"])+"/"+string(r["b"]))
		}
		if strings.Join(order, " ") != "1/3 1/9 2/1" { // by the primary key (a, b)
			t.Fatalf("order: %v", order)
		}
		page, _ := e.Svc.Studio().ReadRows(t.Context(), p, s.prj.ID, "public", "items", &api.RowsQuery{Limit: 1, Offset: 1})
		if len(page.Result.Rows) != 1 || string(page.Result.Rows[0]["b"]) != "9" {
			t.Fatalf("page: %+v", page.Result.Rows)
		}
		heap, err := e.Svc.Studio().ReadRows(t.Context(), p, s.prj.ID, "public", "heap", &api.RowsQuery{Limit: 3, Offset: 0})
		if err != nil || len(heap.Result.Rows) != 3 || string(heap.Result.Rows[0]["n"]) != "1" {
			t.Fatalf("a table without a key: %+v %v", heap, err)
		}
		if v, err := e.Svc.Studio().ReadRows(t.Context(), p, s.prj.ID, "public", "item_names", &api.RowsQuery{Limit: 10, Offset: 0}); err != nil || len(v.Result.Rows) != 3 {
			t.Fatalf("a view: %+v %v", v, err)
		}

		up, err := e.Svc.Studio().UpdateRows(t.Context(), p, s.prj.ID, "public", "items", &appliance.UpdateRowsRequest{
			Match: map[string]json.RawMessage{"a": json.RawMessage(`1`), "tags": json.RawMessage(`null`)}, Set: map[string]json.RawMessage{"name": json.RawMessage(`"renamed"`)}})
		if err != nil || up.Result.RowsAffected != 2 || string(up.Result.Rows[0]["name"]) != `"renamed"` {
			t.Fatalf("update: %+v %v", up, err)
		}
		_, err = e.Svc.Studio().UpdateRows(t.Context(), p, s.prj.ID, "public", "items", &appliance.UpdateRowsRequest{Set: map[string]json.RawMessage{"name": json.RawMessage(`"all"`)}})
		wantKind(t, err, appliance.KindInvalid)
		_, err = e.Svc.Studio().DeleteRows(t.Context(), p, s.prj.ID, "public", "items", &appliance.DeleteRowsRequest{})
		wantKind(t, err, appliance.KindInvalid)
		if row := s.mustSQL(t, "SELECT count(*) AS n, count(*) FILTER (WHERE name = 'all') AS all_named FROM items"); string(row["n"]) != `"3"` || string(row["all_named"]) != `"0"` {
			t.Fatalf("a refused empty match changed rows: %v", row)
		}
		all, err := e.Svc.Studio().UpdateRows(t.Context(), p, s.prj.ID, "public", "items", &appliance.UpdateRowsRequest{Set: map[string]json.RawMessage{"name": json.RawMessage(`"all"`)}, AllRows: true})
		if err != nil || all.Result.RowsAffected != 3 {
			t.Fatalf("update all_rows: %+v %v", all, err)
		}
		for name, body := range map[string]*appliance.InsertRowsRequest{
			"unknown column": {Rows: []map[string]json.RawMessage{{"a": json.RawMessage(`5`), "b": json.RawMessage(`5`), "nope": json.RawMessage(`1`)}}},
			"wrong type":     {Rows: []map[string]json.RawMessage{{"a": json.RawMessage(`"five"`), "b": json.RawMessage(`5`)}}},
			"not null":       {Rows: []map[string]json.RawMessage{{"a": json.RawMessage(`5`), "b": json.RawMessage(`5`), "name": json.RawMessage(`null`)}}},
			"duplicate key":  {Rows: []map[string]json.RawMessage{{"a": json.RawMessage(`1`), "b": json.RawMessage(`3`)}}},
			"no column":      {Rows: []map[string]json.RawMessage{{}, {}}},
		} {
			_, err := e.Svc.Studio().InsertRows(t.Context(), p, s.prj.ID, "public", "items", body)
			if ae := sqlFields(t, err); ae.Kind != appliance.KindInvalid {
				t.Errorf("%s: %+v", name, ae)
			}
		}
		del, err := e.Svc.Studio().DeleteRows(t.Context(), p, s.prj.ID, "public", "items", &appliance.DeleteRowsRequest{Match: map[string]json.RawMessage{"a": json.RawMessage(`2`)}})
		if err != nil || del.Result.RowsAffected != 1 || string(del.Result.Rows[0]["b"]) != "1" {
			t.Fatalf("delete: %+v %v", del, err)
		}
	})

	t.Run("hostile names are names", func(t *testing.T) {
		const evil = `x"; DROP TABLE canary; --`
		s.mustSQL(t, `CREATE TABLE canary (n int); CREATE SCHEMA "x""; DROP TABLE canary; --";
CREATE TABLE "x""; DROP TABLE canary; --"."x""; DROP TABLE canary; --" ("x""; DROP TABLE canary; --" int PRIMARY KEY, "'; DROP TABLE canary; --" text)`)
		quoteVal := json.RawMessage(mustJSON(`'); DROP TABLE canary; --`))
		steps := []struct {
			name string
			do   func() error
		}{
			{"columns", func() error { _, err := e.Svc.Studio().TableColumns(t.Context(), p, s.prj.ID, evil, evil); return err }},
			{"insert", func() error {
				_, err := e.Svc.Studio().InsertRows(t.Context(), p, s.prj.ID, evil, evil, &appliance.InsertRowsRequest{Rows: []map[string]json.RawMessage{{evil: json.RawMessage(`1`), `'; DROP TABLE canary; --`: quoteVal}}})
				return err
			}},
			{"read", func() error {
				_, err := e.Svc.Studio().ReadRows(t.Context(), p, s.prj.ID, evil, evil, &api.RowsQuery{Limit: 10, Offset: 0})
				return err
			}},
			{"update", func() error {
				_, err := e.Svc.Studio().UpdateRows(t.Context(), p, s.prj.ID, evil, evil, &appliance.UpdateRowsRequest{Match: map[string]json.RawMessage{evil: json.RawMessage(`1`)}, Set: map[string]json.RawMessage{`'; DROP TABLE canary; --`: quoteVal}})
				return err
			}},
			{"match value", func() error {
				_, err := e.Svc.Studio().DeleteRows(t.Context(), p, s.prj.ID, evil, evil, &appliance.DeleteRowsRequest{Match: map[string]json.RawMessage{`'; DROP TABLE canary; --`: json.RawMessage(`"x' OR '1'='1"`)}})
				return err
			}},
			{"delete", func() error {
				_, err := e.Svc.Studio().DeleteRows(t.Context(), p, s.prj.ID, evil, evil, &appliance.DeleteRowsRequest{Match: map[string]json.RawMessage{evil: json.RawMessage(`1`)}})
				return err
			}},
		}
		for _, st := range steps {
			if err := st.do(); err != nil {
				t.Fatalf("%s: %v", st.name, err)
			}
		}
		// Names that do not exist fail as names, whatever they hold.
		for _, name := range []string{`items; DROP TABLE canary`, `items" WHERE false; DROP TABLE canary; --`, `../items`, `items%00`} {
			_, err := e.Svc.Studio().ReadRows(t.Context(), p, s.prj.ID, "public", name, &api.RowsQuery{Limit: 10, Offset: 0})
			wantKind(t, err, appliance.KindNotFound)
			_, err = e.Svc.Studio().InsertRows(t.Context(), p, s.prj.ID, "public", "items", &appliance.InsertRowsRequest{Rows: []map[string]json.RawMessage{{name: json.RawMessage(`1`)}}})
			wantKind(t, err, appliance.KindInvalid)
		}
		if row := s.mustSQL(t, "SELECT to_regclass('canary') IS NOT NULL AS here"); string(row["here"]) != "true" {
			t.Fatal("the canary table is gone")
		}
	})

	t.Run("ai usage", func(t *testing.T) {
		now := time.Date(2026, 3, 31, 23, 0, 0, 0, time.UTC)
		e.Clock.Set(func() time.Time { return now })
		defer e.Clock.Set(time.Now)
		plan, _ := e.Svc.PlanByName(s.prj.Plan)
		var u *appliance.AIUsageResponse
		var err error
		for range plan.AIUsesPerMonth {
			if u, err = e.Svc.Studio().RecordAIUse(t.Context(), p, s.prj.ID); err != nil {
				t.Fatal(err)
			}
		}
		if u.Usage.Used != plan.AIUsesPerMonth || u.Usage.Remaining != 0 || !u.Usage.SoftCapReached ||
			!u.Usage.PeriodStart.Equal(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)) || !u.Usage.PeriodEnd.Equal(time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)) {
			t.Fatalf("usage: %+v", u.Usage)
		}
		_, err = e.Svc.Studio().RecordAIUse(t.Context(), p, s.prj.ID)
		wantRetryAfter(t, err, time.Hour) // until April
		now = now.Add(2 * time.Hour)      // April
		g, err := e.Svc.Studio().GetAIUsage(t.Context(), p, s.prj.ID)
		if err != nil || g.Usage.Used != 0 || g.Usage.Remaining != plan.AIUsesPerMonth || g.Usage.SoftCapReached {
			t.Fatalf("next month: %+v %v", g, err)
		}
	})
}

// crashCopy opens a copy of the appliance's metadata store as its file is at this moment: what a restart
// after a crash now would find (bbolt keeps the last committed transaction whole).
func crashCopy(t *testing.T, e *appliancetest.Env) *store.DB {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.Dir, "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "meta.db")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// TestStudioSessionReset: a console text that leaves anything in its session (a setting, a temporary
// table, a prepared statement, a LISTEN, an advisory lock, an open transaction) never reaches the next
// run on that session; a text that provably leaves nothing is not followed by DISCARD ALL.
func TestStudioSessionReset(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	s := &studioEnv{e: e, p: p, prj: provision(t, e, p, "reset", "development")}
	pid := func(row map[string]json.RawMessage) string { return string(row["pid"]) }

	// check runs until it lands on the session of want (the pool hands its sessions out in turn) and
	// reports whether that session was clean; a session destroyed on release never comes back.
	check := func(t *testing.T, q, want string) (clean, reused bool) {
		t.Helper()
		for range 200 {
			row := s.mustSQL(t, q)
			if string(row["clean"]) != "true" {
				return false, pid(row) == want
			}
			if pid(row) == want {
				return true, true
			}
		}
		return true, false
	}
	for _, c := range []struct{ name, text, check string }{
		{"set", "SET search_path = nowhere; SELECT pg_backend_pid() AS pid",
			"SELECT pg_backend_pid() AS pid, current_setting('search_path') <> 'nowhere' AS clean"},
		{"set_config in a select", "SELECT pg_backend_pid() AS pid, set_config('search_path', 'nowhere', false)",
			"SELECT pg_backend_pid() AS pid, current_setting('search_path') <> 'nowhere' AS clean"},
		{"reported setting", "SELECT pg_backend_pid() AS pid, set_config('TimeZone', 'Asia/Tokyo', false)",
			"SELECT pg_backend_pid() AS pid, current_setting('TimeZone') = 'UTC' AS clean"},
		{"temporary table", "CREATE TEMP TABLE scratch (x int); SELECT pg_backend_pid() AS pid",
			"SELECT pg_backend_pid() AS pid, to_regclass('pg_temp.scratch') IS NULL AS clean"},
		{"select into a temporary table", "SELECT pg_backend_pid() AS pid INTO TEMP scratch2; SELECT pid FROM scratch2",
			"SELECT pg_backend_pid() AS pid, to_regclass('pg_temp.scratch2') IS NULL AS clean"},
		{"prepare", "PREPARE p AS SELECT 1; SELECT pg_backend_pid() AS pid",
			"SELECT pg_backend_pid() AS pid, NOT EXISTS (SELECT FROM pg_prepared_statements) AS clean"},
		{"listen", "LISTEN somewhere; SELECT pg_backend_pid() AS pid",
			"SELECT pg_backend_pid() AS pid, NOT EXISTS (SELECT FROM pg_listening_channels()) AS clean"},
		{"advisory lock", "SELECT pg_backend_pid() AS pid, pg_advisory_lock(42)",
			"SELECT pg_backend_pid() AS pid, NOT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()) AS clean"},
	} {
		t.Run(c.name, func(t *testing.T) {
			row := s.mustSQL(t, c.text)
			clean, reused := check(t, c.check, pid(row))
			if !clean {
				t.Fatalf("%s: the next run on session %s found its state", c.text, pid(row))
			}
			if !reused {
				t.Fatalf("%s: session %s never came back to run the check", c.text, pid(row))
			}
		})
	}

	t.Run("open transaction", func(t *testing.T) {
		row := s.mustSQL(t, "BEGIN; SELECT pg_backend_pid() AS pid")
		// The session is destroyed on release (pgxpool does not pool one in a transaction): no later run is
		// in that transaction, and none lands on it.
		for range 20 {
			r := s.mustSQL(t, "SELECT pg_backend_pid() AS pid, now() = statement_timestamp() AS clean")
			if string(r["clean"]) != "true" || pid(r) == pid(row) {
				t.Fatalf("a run after BEGIN found the transaction: %v (the BEGIN ran on %s)", r, pid(row))
			}
		}
	})

	t.Run("inert texts skip DISCARD ALL", func(t *testing.T) {
		if err := e.Svc.AdminExec(t.Context(), s.prj.ID, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements SCHEMA public"); err != nil {
			t.Fatal(err)
		}
		discards := func() int {
			n := 0
			if err := e.Svc.AdminQueryRow(t.Context(), s.prj.ID, "SELECT coalesce(sum(calls), 0)::int FROM public.pg_stat_statements WHERE query LIKE '%DISCARD ALL'", nil, &n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		// The earlier runs' DISCARD ALLs run after their release, asynchronously: wait until they are all
		// counted (the count stays the same for 200 ms).
		before := discards()
		for range 50 {
			time.Sleep(200 * time.Millisecond)
			if n := discards(); n == before {
				break
			} else {
				before = n
			}
		}
		for range 20 {
			s.mustSQL(t, "select g, md5(g::text) from generate_series(1, 10) g")
		}
		// Had they been followed by DISCARD ALL, at least 16 would be counted by now: no session is handed
		// out again before its DISCARD ALL ends, and there are 4.
		if n := discards(); n != before {
			t.Fatalf("%d DISCARD ALL after 20 inert runs", n-before)
		}
		for range 20 {
			s.mustSQL(t, "select 1 from pg_class limit 1")
		}
		if n := discards(); n < before+16 {
			t.Fatalf("%d DISCARD ALL after 20 runs reading a relation, want at least 16", n-before)
		}
	})
}

// TestStudioRefusesBigRowsUnread: a row over the console's cap is refused from its header, before it is
// read: the process does not allocate anything like the row's size. Not parallel: TotalAlloc counts the
// whole test process, and the other tests (a bucket's WAL sealed in this process, say) allocate too; a
// top-level test that is not parallel runs while the parallel ones wait.
func TestStudioRefusesBigRowsUnread(t *testing.T) {
	e, p := realEnv(t)
	s := &studioEnv{e: e, p: p, prj: provision(t, e, p, "studio big rows", "development")}
	const size = 32 << 20
	for _, q := range []string{
		fmt.Sprintf("SELECT repeat('x', %d) AS big", size),
		fmt.Sprintf("COPY (SELECT repeat('x', %d)) TO STDOUT", size),
	} {
		// The least of three refusals: the service's own background work allocates too (a refusal that
		// read the row would allocate it each time).
		var err error
		least := uint64(math.MaxUint64)
		for range 3 {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err = s.sql(t, q)
			runtime.ReadMemStats(&after)
			least = min(least, after.TotalAlloc-before.TotalAlloc)
		}
		ae := sqlFields(t, err)
		if ae.Kind != appliance.KindInvalid || ae.Fields["max_row_bytes"] != studio.MaxMessageBytes || !strings.Contains(ae.Msg, "refuses rows over") {
			t.Fatalf("%.40s: %+v", q, ae)
		}
		// Refused from the header, which told the row's size; and the process did not allocate anything
		// like that size.
		var big *studio.TooLargeError
		if !errors.As(err, &big) || big.Size <= size {
			t.Fatalf("%.40s: refused %+v, want the row's size from its header", q, big)
		}
		if d := least; d > size/2 {
			t.Fatalf("%.40s: %d MiB allocated while refusing a row of %d MiB", q, d>>20, size>>20)
		}
		// The closed session is replaced.
		if row := s.mustSQL(t, "SELECT 1 AS one"); string(row["one"]) != "1" {
			t.Fatalf("after a refused row: %v", row)
		}
	}
	// A row write whose answer (RETURNING *) is refused may have committed: it is audited all the same.
	s.mustSQL(t, fmt.Sprintf("CREATE TABLE wide (id int PRIMARY KEY, n int, body text); INSERT INTO wide VALUES (1, 0, repeat('w', %d))", studio.MaxMessageBytes+1))
	_, err := e.Svc.Studio().UpdateRows(t.Context(), p, s.prj.ID, "public", "wide", &appliance.UpdateRowsRequest{
		Match: map[string]json.RawMessage{"id": json.RawMessage("1")}, Set: map[string]json.RawMessage{"n": json.RawMessage("1")}})
	if ae := sqlFields(t, err); ae.Fields["max_row_bytes"] != studio.MaxMessageBytes {
		t.Fatalf("row update with a wide answer: %+v", ae)
	}
	var audit []*store.AuditEvent
	if err := crashCopy(t, e).View(func(tx *store.Tx) error {
		audit, err = store.AuditEvents.Lookup(tx, store.AuditEventsByProject, s.prj.ID, store.Query{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(audit, func(a *store.AuditEvent) bool {
		return a.Action == "project.rows.update" && strings.Contains(string(a.Metadata), `"answer_refused":true`)
	}) {
		t.Fatal("a row update whose answer was refused left no audit event")
	}
}
