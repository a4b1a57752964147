package pglog

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// pgLine has the keys of a PostgreSQL 15 jsonlog line in the order the server writes them.
type pgLine struct {
	Timestamp     string `json:"timestamp"`
	User          string `json:"user,omitempty"`
	DBName        string `json:"dbname,omitempty"`
	PID           int    `json:"pid"`
	RemoteHost    string `json:"remote_host,omitempty"`
	SessionID     string `json:"session_id"`
	LineNum       int    `json:"line_num"`
	PS            string `json:"ps,omitempty"`
	SessionStart  string `json:"session_start"`
	VXID          string `json:"vxid,omitempty"`
	TXID          int    `json:"txid"`
	ErrorSeverity string `json:"error_severity"`
	StateCode     string `json:"state_code,omitempty"`
	Message       string `json:"message"`
	Statement     string `json:"statement,omitempty"`
	AppName       string `json:"application_name,omitempty"`
	BackendType   string `json:"backend_type"`
	QueryID       int    `json:"query_id"`
}

// jl returns one jsonlog line (with its '\n') as PostgreSQL 15 writes it.
func jl(ts time.Time, sev, user, msg string) string {
	l := pgLine{
		Timestamp:     ts.UTC().Format("2006-01-02 15:04:05.000") + " UTC",
		PID:           4242,
		SessionID:     "6b06e181.c79",
		LineNum:       1,
		SessionStart:  ts.UTC().Format("2006-01-02 15:04:05") + " UTC",
		ErrorSeverity: sev,
		Message:       msg,
		BackendType:   "postmaster",
	}
	if user != "" {
		l.User, l.DBName, l.RemoteHost, l.PS, l.VXID = user, "app", "127.0.0.1", "SELECT", "3/2"
		l.AppName, l.BackendType = "psql", "client backend"
	}
	b, err := json.Marshal(l)
	if err != nil {
		panic(err)
	}
	return string(b) + "\n"
}

// env is a test's log directories.
type env struct {
	t    *testing.T
	dirs Dirs
}

func setup(t *testing.T) *env {
	t.Helper()
	root := t.TempDir()
	e := &env{t: t, dirs: Dirs{Live: filepath.Join(root, "pgdata", "log"), Archive: filepath.Join(root, "archive")}}
	for _, d := range []string{e.dirs.Live, e.dirs.Archive} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func (e *env) livePath(d string) string { return filepath.Join(e.dirs.Live, "postgresql-"+d+".json") }
func (e *env) archivePath(d string) string {
	return filepath.Join(e.dirs.Archive, "postgresql-"+d+".json.gz")
}

// appendLive appends text to the live file of day d ("2026-11-24").
func (e *env) appendLive(d, text string) {
	e.t.Helper()
	f, err := os.OpenFile(e.livePath(d), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := f.WriteString(text); err != nil {
		e.t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		e.t.Fatal(err)
	}
}

// writeArchive writes text as the archived file of day d.
func (e *env) writeArchive(d, text string) {
	e.t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write([]byte(text))
	zw.Close()
	if err := os.WriteFile(e.archivePath(d), b.Bytes(), 0o600); err != nil {
		e.t.Fatal(err)
	}
}

// day writes n LOG lines for day d, one a minute from 10:00, messages "<d> #<i>", and returns them.
func dayLines(d string, n int) string {
	t0, err := time.Parse("2006-01-02 15:04", d+" 10:00")
	if err != nil {
		panic(err)
	}
	var b bytes.Buffer
	for i := range n {
		b.WriteString(jl(t0.Add(time.Duration(i)*time.Minute), "LOG", "app", fmt.Sprintf("%s #%d", d, i)))
	}
	return b.String()
}

func messages(es []Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Message
	}
	return out
}

func mustRead(t *testing.T, d Dirs, q Query) ([]Entry, string) {
	t.Helper()
	es, next, err := Read(d, q)
	if err != nil {
		t.Fatalf("Read(%+v): %v", q, err)
	}
	return es, next
}

func ts(s string) time.Time {
	t, err := time.Parse("2006-01-02 15:04", s)
	if err != nil {
		panic(err)
	}
	return t
}
