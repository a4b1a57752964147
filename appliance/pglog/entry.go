// Package pglog reads the logs that an instance's PostgreSQL 15 writes with log_destination = 'jsonlog'
// (one JSON object per line, one file per UTC day, postgresql-YYYY-MM-DD.json in <pgdata>/log), follows
// them as they grow, and keeps them: yesterday's files compressed into an archive, old ones deleted.
// Entries are shown with passwords masked (redact.go).
package pglog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/theappliance/appliance/api"
)

// Severities are the API's severity values, in order.
var Severities = api.LogSeverities

// ParseSeverities parses a comma-separated filter ("" → nil, meaning all); an unknown value → an error
// naming it and the allowed values. Case-insensitive, spaces trimmed.
func ParseSeverities(csv string) (map[string]bool, error) {
	if strings.TrimSpace(csv) == "" {
		return nil, nil
	}
	set := make(map[string]bool)
	for _, v := range strings.Split(csv, ",") {
		v = strings.ToLower(strings.TrimSpace(v))
		if v == "" {
			continue
		}
		if !isSeverity(v) {
			return nil, fmt.Errorf("unknown log severity %q: allowed values are %s", v, strings.Join(Severities, ", "))
		}
		set[v] = true
	}
	if len(set) == 0 {
		return nil, nil
	}
	return set, nil
}

func isSeverity(v string) bool {
	for _, s := range Severities {
		if s == v {
			return true
		}
	}
	return false
}

// severity maps jsonlog's error_severity to the API's value. PostgreSQL 15 writes "DEBUG" for DEBUG1 to
// DEBUG5; the numbered forms are accepted too. "DETAIL" is what the stderr format prints on a detail's
// own line. Anything else is shown lowercased rather than dropped.
func severity(s string) string {
	switch strings.ToUpper(s) {
	case "DEBUG", "DEBUG1", "DEBUG2", "DEBUG3", "DEBUG4", "DEBUG5":
		return "debug"
	case "LOG", "LOG_SERVER_ONLY":
		return "log"
	case "INFO":
		return "info"
	case "NOTICE":
		return "notice"
	case "WARNING", "WARNING_CLIENT_ONLY":
		return "warning"
	case "ERROR":
		return "error"
	case "FATAL":
		return "fatal"
	case "PANIC":
		return "panic"
	case "DETAIL":
		return "detail"
	}
	return strings.ToLower(s)
}

// jsonLine holds the keys of a jsonlog line that an Entry shows.
type jsonLine struct {
	Timestamp       string `json:"timestamp"`
	User            string `json:"user"`
	DBName          string `json:"dbname"`
	PID             int    `json:"pid"`
	ErrorSeverity   string `json:"error_severity"`
	StateCode       string `json:"state_code"`
	Message         string `json:"message"`
	Detail          string `json:"detail"`
	Hint            string `json:"hint"`
	Statement       string `json:"statement"`
	ApplicationName string `json:"application_name"`
	BackendType     string `json:"backend_type"`
	QueryID         int64  `json:"query_id"` // 0 when the statement had none (compute_query_id computes it with pg_stat_statements)
}

// parseTimestamp parses jsonlog's "2026-11-25 13:21:46.123 UTC". log_timezone is UTC on the appliance's
// instances; another zone's abbreviation is read as Go reads it (an unknown one as UTC).
func parseTimestamp(s string) (time.Time, bool) {
	if t, ok := parseUTC(s); ok {
		return t, true
	}
	for _, layout := range []string{"2006-01-02 15:04:05.999 MST", "2006-01-02 15:04:05.999 -07", "2006-01-02 15:04:05.999 -0700"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), true
		}
	}
	return time.Time{}, false
}

// parseUTC is the fast path of parseTimestamp: "YYYY-MM-DD HH:MM:SS.mmm UTC" exactly.
func parseUTC(s string) (time.Time, bool) {
	if len(s) != 27 || s[4] != '-' || s[7] != '-' || s[10] != ' ' || s[13] != ':' || s[16] != ':' || s[19] != '.' || s[23:] != " UTC" {
		return time.Time{}, false
	}
	num := func(from, to int) int {
		n := 0
		for i := from; i < to; i++ {
			c := s[i]
			if c < '0' || c > '9' {
				return -1
			}
			n = n*10 + int(c-'0')
		}
		return n
	}
	y, mo, d, h, mi, sec, ms := num(0, 4), num(5, 7), num(8, 10), num(11, 13), num(14, 16), num(17, 19), num(20, 23)
	if y < 0 || mo < 1 || mo > 12 || d < 1 || d > 31 || h < 0 || h > 23 || mi < 0 || mi > 59 || sec < 0 || sec > 60 || ms < 0 {
		return time.Time{}, false
	}
	return time.Date(y, time.Month(mo), d, h, mi, sec, ms*int(time.Millisecond), time.UTC), true
}

// matcher decides which lines a Query selects and makes their entries.
type matcher struct {
	since    time.Time // zero: no lower bound
	until    time.Time // zero: no upper bound
	sev      map[string]bool
	excluded map[string]bool
	text     string // lowercased; "" matches every entry
	user     string
	database string
	sqlstate string
}

func newMatcher(q Query, useSince bool) *matcher {
	m := &matcher{sev: q.Severities, until: q.Until, text: strings.ToLower(q.Text), user: q.User, database: q.Database, sqlstate: q.SQLState}
	if useSince {
		m.since = q.Since
	}
	if len(q.ExcludeUsers) > 0 {
		m.excluded = make(map[string]bool, len(q.ExcludeUsers))
		for _, u := range q.ExcludeUsers {
			m.excluded[u] = true
		}
	}
	if len(m.sev) == 0 {
		m.sev = nil
	}
	return m
}

// check returns the entry of line when the query selects it (ok), and the line's time when it is known
// (zero otherwise) so that a backward scan can stop. A line that is not a JSON object is never selected.
// The entry's Cursor is left to the caller; its text fields are redacted.
func (m *matcher) check(line []byte) (e Entry, ts time.Time, ok bool) {
	// Cheap look at the raw bytes first: most lines of a filtered scan are rejected here without decoding.
	if !m.since.IsZero() {
		ts, _ = parseTimestamp(rawString(line, keyTimestamp))
		if !ts.IsZero() && ts.Before(m.since) {
			return Entry{}, ts, false
		}
	}
	if m.sev != nil {
		if s := rawString(line, keySeverity); s != "" && !m.sev[severity(s)] {
			return Entry{}, ts, false
		}
	}
	if m.excluded != nil || m.user != "" {
		if u := rawString(line, keyUser); u != "" && (m.excluded[u] || m.user != "" && u != m.user) {
			return Entry{}, ts, false
		}
	}
	if m.sqlstate != "" && !bytes.Contains(line, []byte(`"state_code":"`+m.sqlstate+`"`)) {
		return Entry{}, ts, false
	}

	var j jsonLine
	if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &j) != nil {
		return Entry{}, ts, false
	}
	t, tok := parseTimestamp(j.Timestamp)
	if !tok {
		return Entry{}, ts, false
	}
	ts = t
	e = Entry{
		Timestamp:   t,
		Severity:    severity(j.ErrorSeverity),
		Message:     j.Message,
		SQLState:    j.StateCode,
		Detail:      j.Detail,
		Hint:        j.Hint,
		Statement:   j.Statement,
		User:        j.User,
		Database:    j.DBName,
		PID:         j.PID,
		Application: j.ApplicationName,
		BackendType: j.BackendType,
	}
	if j.QueryID != 0 {
		e.QueryID = strconv.FormatInt(j.QueryID, 10)
	}
	if !m.since.IsZero() && t.Before(m.since) {
		return Entry{}, ts, false
	}
	if !m.until.IsZero() && t.After(m.until) {
		return Entry{}, ts, false
	}
	if m.user != "" && e.User != m.user || m.database != "" && e.Database != m.database || m.sqlstate != "" && e.SQLState != m.sqlstate {
		return Entry{}, ts, false
	}
	if m.sev != nil && !m.sev[e.Severity] {
		return Entry{}, ts, false
	}
	if m.excluded != nil && e.User != "" && m.excluded[e.User] {
		return Entry{}, ts, false
	}
	redactEntry(&e)
	if m.text != "" && !containsFold(&e, m.text) {
		return Entry{}, ts, false
	}
	return e, ts, true
}

// containsFold reports whether any of the entry's texts (as shown: passwords masked, so a search cannot
// find one) holds lower, a lowercased string, ignoring case.
func containsFold(e *Entry, lower string) bool {
	for _, s := range []string{e.Message, e.Detail, e.Hint, e.Statement} {
		if strings.Contains(strings.ToLower(s), lower) {
			return true
		}
	}
	return false
}

var (
	keyTimestamp = []byte(`"timestamp":"`)
	keySeverity  = []byte(`"error_severity":"`)
	keyUser      = []byte(`"user":"`)
)

// rawString returns the value of a string key of a jsonlog line without decoding the line, or "" when the
// key is missing or its value has escapes. In JSON text a quote inside a string is always escaped, so
// `"key":"` can only be found where the key really is.
func rawString(line, key []byte) string {
	i := bytes.Index(line, key)
	if i < 0 {
		return ""
	}
	v := line[i+len(key):]
	j := bytes.IndexByte(v, '"')
	if j < 0 || bytes.IndexByte(v[:j], '\\') >= 0 {
		return ""
	}
	return string(v[:j])
}
