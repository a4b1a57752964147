package appliance_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/observe"
	"github.com/theappliance/appliance/httpapi"
)

// TestLogsExplorer: the logs' search (text, user, database, SQLSTATE, a time range) and the download
// over the lines a real server logs for two roles in two databases, then over the same lines once
// their day is in the log archive; bad input is refused with a 400 naming the parameter.
func TestLogsExplorer(t *testing.T) {
	t.Parallel()
	e, p := keyEnv(t, appliancetest.Options{Instances: true, LogArchiveDays: 30})
	prj := provision(t, e, p, "searched", "development")
	svc := e.Svc.Observe()

	c, err := e.Svc.ProjectConnections(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	owner, err := pgx.ParseConfig(c.Connections.DirectURL)
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		"CREATE ROLE explorer_alice LOGIN PASSWORD 'alice-pw-1'",
		"CREATE DATABASE explorer_other OWNER explorer_alice",
	} {
		if err := e.Svc.AdminExec(t.Context(), prj.ID, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	alice, err := pgx.ParseConfig(c.Connections.DirectURL)
	if err != nil {
		t.Fatal(err)
	}
	alice.User, alice.Password, alice.Database = "explorer_alice", "alice-pw-1", "explorer_other"

	before := time.Now().UTC().Add(-time.Second)
	run := func(cfg *pgx.ConnConfig, stmts ...string) {
		t.Helper()
		conn, err := pgx.ConnectConfig(t.Context(), cfg)
		if err != nil {
			t.Fatalf("connect as %s: %v", cfg.User, err)
		}
		defer conn.Close(t.Context())
		for _, s := range stmts {
			conn.Exec(t.Context(), s) // some fail on purpose: the server logs their errors
		}
	}
	run(owner,
		"DO $$ BEGIN RAISE LOG 'explorer-needle owner'; END $$",
		"SELECT * FROM explorer_missing_table",
		"SELECT 1/0 AS owner_division")
	run(alice,
		"DO $$ BEGIN RAISE LOG 'Explorer-NEEDLE alice'; END $$",
		"SELECT 1/0 AS alice_division")

	read := func(t *testing.T, q appliance.LogsQuery) []api.Entry {
		t.Helper()
		if q.Limit == 0 {
			q.Limit = 500
		}
		if q.Hours == 0 {
			q.Hours = 1
		}
		res, err := svc.ReadLogs(t.Context(), p, prj.ID, q)
		if err != nil {
			t.Fatalf("read %+v: %v", q, err)
		}
		return res.Logs.Entries
	}
	// The logging collector writes asynchronously: wait for alice's last line.
	deadline := time.Now().Add(20 * time.Second)
	for len(read(t, appliance.LogsQuery{Q: "alice_division"})) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("alice's error never reached the log: %+v", read(t, appliance.LogsQuery{}))
		}
		time.Sleep(100 * time.Millisecond)
	}
	after := time.Now().UTC()

	messages := func(es []api.Entry) []string {
		out := make([]string, len(es))
		for i, x := range es {
			out[i] = x.User + "@" + x.Database + " " + x.SQLState + " " + x.Message
		}
		return out
	}
	want := func(t *testing.T, name string, got []api.Entry, want ...string) {
		t.Helper()
		if g := messages(got); strings.Join(g, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s:\n got %q\nwant %q", name, g, want)
		}
	}
	ownerAt := owner.User + "@" + owner.Database
	searches := func(t *testing.T, extra appliance.LogsQuery) {
		t.Helper()
		with := func(q appliance.LogsQuery) appliance.LogsQuery {
			q.Hours, q.From, q.To = max(1, extra.Hours), extra.From, extra.To
			return q
		}
		want(t, "text, ignoring case", read(t, with(appliance.LogsQuery{Q: "explorer-needle"})),
			ownerAt+"  explorer-needle owner", "explorer_alice@explorer_other  Explorer-NEEDLE alice")
		want(t, "a user", read(t, with(appliance.LogsQuery{User: "explorer_alice", Severity: "log,error"})),
			"explorer_alice@explorer_other  Explorer-NEEDLE alice", "explorer_alice@explorer_other 22012 division by zero")
		want(t, "a database and a SQLSTATE", read(t, with(appliance.LogsQuery{Database: owner.Database, SQLState: "42p01"})),
			ownerAt+" 42P01 relation \"explorer_missing_table\" does not exist")
		want(t, "a SQLSTATE in both databases", read(t, with(appliance.LogsQuery{SQLState: "22012"})),
			ownerAt+" 22012 division by zero", "explorer_alice@explorer_other 22012 division by zero")
		want(t, "the newest of the matches", read(t, with(appliance.LogsQuery{SQLState: "22012", Limit: 1})),
			"explorer_alice@explorer_other 22012 division by zero")
		want(t, "the text of a statement", read(t, with(appliance.LogsQuery{Q: "OWNER_DIVISION"})), ownerAt+" 22012 division by zero")
		want(t, "no match", read(t, with(appliance.LogsQuery{Q: "explorer-needle", User: "nobody"})))
		div := read(t, with(appliance.LogsQuery{Q: "alice_division"}))
		if len(div) != 1 || div[0].Statement != "SELECT 1/0 AS alice_division" || div[0].QueryID == "" || div[0].QueryID == "0" {
			t.Errorf("alice's division carries its statement and query id: %+v", div)
		}

		var buf bytes.Buffer
		q := with(appliance.LogsQuery{Severity: "error"})
		if err := svc.DownloadLogs(t.Context(), p, prj.ID, q, func() io.Writer { return &buf }); err != nil {
			t.Fatal(err)
		}
		var got []api.Entry
		for _, line := range strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n") {
			var x api.Entry
			if err := json.Unmarshal([]byte(line), &x); err != nil {
				t.Fatalf("download line %q: %v", line, err)
			}
			got = append(got, x)
		}
		want(t, "the download", got,
			ownerAt+" 42P01 relation \"explorer_missing_table\" does not exist", ownerAt+" 22012 division by zero",
			"explorer_alice@explorer_other 22012 division by zero")
	}
	rangeOf := appliance.LogsQuery{From: before.Format(time.RFC3339Nano), To: after.Format(time.RFC3339Nano)}
	t.Run("live", func(t *testing.T) {
		searches(t, appliance.LogsQuery{Hours: 1})
		searches(t, rangeOf)
		want(t, "a range before the lines", read(t, appliance.LogsQuery{Q: "explorer-needle", From: before.Add(-time.Hour).Format(time.RFC3339), To: before.Format(time.RFC3339Nano)}))
		want(t, "a range after the lines", read(t, appliance.LogsQuery{Q: "explorer-needle", From: after.Format(time.RFC3339Nano)}))
	})

	t.Run("bad input changes nothing", func(t *testing.T) {
		now := time.Now().UTC()
		for _, c := range []struct {
			q    appliance.LogsQuery
			want string
		}{
			{appliance.LogsQuery{From: "yesterday"}, "from must be an RFC 3339 time"},
			{appliance.LogsQuery{From: now.Add(-time.Hour).Format(time.RFC3339), To: "soon"}, "to must be an RFC 3339 time"},
			{appliance.LogsQuery{From: now.Format(time.RFC3339), To: now.Add(-time.Hour).Format(time.RFC3339)}, "to must be after from"},
			{appliance.LogsQuery{From: now.Add(-800 * time.Hour).Format(time.RFC3339)}, "within the last"},
			{appliance.LogsQuery{From: now.Add(time.Hour).Format(time.RFC3339)}, "future"},
			{appliance.LogsQuery{From: now.Add(-time.Hour).Format(time.RFC3339), Cursor: "20261125.10"}, "cursor"},
			{appliance.LogsQuery{SQLState: "4200"}, "sqlstate"},
			{appliance.LogsQuery{SQLState: "42P0%"}, "sqlstate"},
			{appliance.LogsQuery{Q: strings.Repeat("x", observe.LogsSearchMax+1)}, "q must be at most"},
			{appliance.LogsQuery{User: strings.Repeat("u", 64)}, "user must be at most"},
			{appliance.LogsQuery{Database: strings.Repeat("d", 64)}, "database must be at most"},
		} {
			q := c.q
			q.Hours, q.Limit = 1, 10
			_, err := svc.ReadLogs(t.Context(), p, prj.ID, q)
			if appliance.KindOf(err) != appliance.KindInvalid || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%+v: %v (want a 400 naming %q)", c.q, err, c.want)
			}
			if c.q.Cursor != "" {
				continue // the download takes no cursor: it ignores one
			}
			started := false
			err = svc.DownloadLogs(t.Context(), p, prj.ID, q, func() io.Writer { started = true; return io.Discard })
			if started || appliance.KindOf(err) != appliance.KindInvalid {
				t.Errorf("download %+v: started %v, %v", c.q, started, err)
			}
		}
		if _, err := svc.ReadLogs(t.Context(), p, prj.ID, appliance.LogsQuery{Hours: 1, Limit: 10, Stream: true, From: now.Add(-time.Hour).Format(time.RFC3339)}); appliance.KindOf(err) != appliance.KindInvalid {
			t.Errorf("a range on the live tail: %v", err)
		}
	})

	t.Run("archived", func(t *testing.T) {
		// Two days on, today's file is compressed into the archive and the live one removed.
		later := time.Now().Add(48 * time.Hour)
		e.Clock.Set(func() time.Time { return later })
		compressed, _, err := svc.MaintainLogs(t.Context())
		if err != nil || compressed == 0 {
			t.Fatalf("maintain: %d compressed, %v", compressed, err)
		}
		searches(t, rangeOf)
		searches(t, appliance.LogsQuery{Hours: 72})
	})
}

// TestLogsDownloadOverHTTP: GET …/logs/download streams NDJSON from the API served as up serves it (TLS,
// HTTP/2 and HTTP/1.1): an attachment whose every line is an entry, the server's error line among them.
func TestLogsDownloadOverHTTP(t *testing.T) {
	t.Parallel()
	e, p := keyEnv(t, appliancetest.Options{Instances: true})
	prj := provision(t, e, p, "downloaded logs", "development")
	from := time.Now().UTC().Add(-time.Minute).Format(time.RFC3339)
	c, err := e.Svc.ProjectConnections(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(t.Context(), c.Connections.DirectURL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(t.Context(), "SELECT 1/0 AS h2_division"); err == nil {
		t.Fatal("1/0 did not fail")
	}
	conn.Close(t.Context())
	// The logging collector writes asynchronously: wait for the line.
	deadline := time.Now().Add(20 * time.Second)
	for {
		res, err := e.Svc.Observe().ReadLogs(t.Context(), p, prj.ID, appliance.LogsQuery{Q: "h2_division", Hours: 1, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Logs.Entries) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the error never reached the log")
		}
		time.Sleep(100 * time.Millisecond)
	}

	h := httpapi.New(e.Svc, httpapi.Options{Log: slog.New(slog.DiscardHandler), Lane: e.Lane,
		Limits: httpapi.RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6}})
	t.Cleanup(h.Close)
	base := serveTLS(t, e, h)
	for _, h2 := range []bool{true, false} {
		t.Run(map[bool]string{true: "HTTP/2", false: "HTTP/1.1"}[h2], func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet,
				base+"/v1/projects/"+prj.ID+"/logs/download?severity=error,log&from="+url.QueryEscape(from), nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+e.Bootstrap.APIKey)
			resp, err := tlsClient(t, e, h2).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			checkProto(t, resp, h2)
			if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/x-ndjson" ||
				!strings.HasPrefix(resp.Header.Get("Content-Disposition"), "attachment; filename=") {
				t.Fatalf("download: %d %v %v\n%s", resp.StatusCode, resp.Header, err, body)
			}
			found := 0
			for _, line := range strings.Split(strings.TrimSuffix(string(body), "\n"), "\n") {
				var x api.Entry
				if err := json.Unmarshal([]byte(line), &x); err != nil || x.Message == "" {
					t.Fatalf("download line %q: %v", line, err)
				}
				if x.Statement == "SELECT 1/0 AS h2_division" && x.SQLState == "22012" {
					found++
				}
			}
			if found != 1 {
				t.Fatalf("the error line is %d times in the download:\n%s", found, body)
			}
		})
	}
}
