package pglog

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSeverityMapping(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"DEBUG", "debug"}, // what PostgreSQL 15 writes for DEBUG1 to DEBUG5
		{"DEBUG1", "debug"}, {"DEBUG2", "debug"}, {"DEBUG3", "debug"}, {"DEBUG4", "debug"}, {"DEBUG5", "debug"},
		{"LOG", "log"},
		{"INFO", "info"},
		{"NOTICE", "notice"},
		{"WARNING", "warning"},
		{"ERROR", "error"},
		{"FATAL", "fatal"},
		{"PANIC", "panic"},
		{"DETAIL", "detail"},
		{"error", "error"},
		{"STRANGE", "strange"},
	} {
		if got := severity(c.in); got != c.want {
			t.Errorf("severity(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestParseSeverities(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string // nil: all
	}{
		{"", nil},
		{"  ", nil},
		{"error", []string{"error"}},
		{"ERROR, Fatal ,panic", []string{"error", "fatal", "panic"}},
		{"warning,,warning", []string{"warning"}},
		{"detail", []string{"detail"}},
	} {
		got, err := ParseSeverities(c.in)
		if err != nil {
			t.Errorf("ParseSeverities(%q): %v", c.in, err)
			continue
		}
		if c.want == nil {
			if got != nil {
				t.Errorf("ParseSeverities(%q) = %v, want nil", c.in, got)
			}
			continue
		}
		if len(got) != len(c.want) {
			t.Errorf("ParseSeverities(%q) = %v, want %v", c.in, got, c.want)
		}
		for _, w := range c.want {
			if !got[w] {
				t.Errorf("ParseSeverities(%q) = %v, want %v", c.in, got, c.want)
			}
		}
	}
	for _, bad := range []string{"errors", "error,bogus", "DEBUG1", "warn"} {
		_, err := ParseSeverities(bad)
		if err == nil {
			t.Errorf("ParseSeverities(%q): no error", bad)
			continue
		}
		if !strings.Contains(err.Error(), "debug, log, info, notice, warning, error, fatal, panic, detail") {
			t.Errorf("ParseSeverities(%q): %v does not list the allowed values", bad, err)
		}
	}
	if _, err := ParseSeverities("error,bogus"); !strings.Contains(err.Error(), `"bogus"`) {
		t.Errorf("error %v does not name the value", err)
	}
}

// The lines in testdata/pg15-jsonlog.json were written by PostgreSQL 15.18 with the appliance's logging
// settings (and log_statement = 'ddl', log_min_messages = debug1 for one session): see realEntries.
func TestRealLines(t *testing.T) {
	es := realEntries(t)
	if len(es) < 30 {
		t.Fatalf("%d entries", len(es))
	}
	bySev := map[string]int{}
	for _, e := range es {
		bySev[e.Severity]++
		if e.Timestamp.IsZero() || e.Timestamp.Location() != time.UTC {
			t.Errorf("timestamp %v", e.Timestamp)
		}
	}
	for _, s := range []string{"debug", "log", "info", "notice", "warning", "error", "fatal"} {
		if bySev[s] == 0 {
			t.Errorf("no %s entry in the real lines: %v", s, bySev)
		}
	}
	find := func(msg string) Entry {
		for _, e := range es {
			if e.Message == msg {
				return e
			}
		}
		t.Fatalf("no entry %q", msg)
		return Entry{}
	}
	hello := find("hello")
	want := Entry{
		Timestamp: time.Date(2026, 11, 25, 13, 24, 17, 72e6, time.UTC), Severity: "log", Message: "hello",
		Statement: "DO $$ BEGIN RAISE LOG 'hello'; END $$", User: "admin", Database: "postgres", PID: 3193,
		Application: "psql", BackendType: "client backend", Cursor: hello.Cursor,
	}
	if hello != want {
		t.Errorf("hello:\n got %+v\nwant %+v", hello, want)
	}
	notice := find("a notice")
	if notice.Severity != "notice" || notice.Detail != "some detail" || notice.Hint != "a hint" {
		t.Errorf("notice: %+v", notice)
	}
	div := find("division by zero")
	if div.Severity != "error" || div.SQLState != "22012" || div.Statement != "select 1/0" {
		t.Errorf("division: %+v", div)
	}
	fatal := find(`role "nosuchuser" does not exist`)
	if fatal.Severity != "fatal" || fatal.SQLState != "28000" || fatal.User != "nosuchuser" {
		t.Errorf("fatal: %+v", fatal)
	}
	if m := find("multi\nline \"quoted\" \\ back"); m.Severity != "log" {
		t.Errorf("multi-line: %+v", m)
	}
	start := es[0]
	if start.User != "" || start.BackendType != "postmaster" || start.PID != 2982 {
		t.Errorf("first entry: %+v", start)
	}
}

// realEntries reads the captured lines through Read, as the appliance would.
func realEntries(t *testing.T) []Entry {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "pg15-jsonlog.json"))
	if err != nil {
		t.Fatal(err)
	}
	e := setup(t)
	e.appendLive("2026-11-25", string(b))
	es, _ := mustRead(t, e.dirs, Query{Limit: 500})
	if n := strings.Count(string(b), "\n"); len(es) != n {
		t.Fatalf("%d entries of %d lines", len(es), n)
	}
	return es
}
