package cmd

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/theappliance/appliance/httpapi"
)

// TestCLISQL: appliance sql runs a text (argument or standard input) as the project's role and prints the
// last statement's rows as a table or the API's JSON; a SQL error shows the line with a caret; appliance
// tables lists what the text made.
func TestCLISQL(t *testing.T) {
	e := setupCLI(t, cliSetupOpts{instances: true, limits: httpapi.RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6}})
	p := e.login(t)
	prj := e.activeProject(t, p, "console")

	out, _ := e.mustRun("", "sql", prj, "CREATE TABLE notes (id int PRIMARY KEY, body text); INSERT INTO notes VALUES (1, 'first'), (2, NULL), (3, e'two\\nlines'); SELECT * FROM notes ORDER BY id")
	want := "id  body\n1   first\n2   NULL\n3   two\\nlines\n(3 rows)\n"
	if out != want {
		t.Fatalf("sql table:\n%q\nwant\n%q", out, want)
	}
	out, _ = e.mustRun("UPDATE notes SET body = 'x' WHERE id > 1;\n", "sql", prj)
	if out != "UPDATE 2\n" {
		t.Fatalf("sql from stdin: %q", out)
	}
	out, _ = e.mustRun("", "sql", prj, "--json", "SELECT 9223372036854775807::bigint AS big, current_user AS who")
	var res struct {
		Result struct {
			Rows []map[string]any `json:"rows"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Result.Rows) != 1 || res.Result.Rows[0]["big"] != "9223372036854775807" ||
		res.Result.Rows[0]["who"] == "postgres" || res.Result.Rows[0]["who"] == "" {
		t.Fatalf("sql --json: %s (%v)", out, err)
	}
	_, _, err := e.run("", "sql", prj, "SELECT id,\n  nope FROM notes")
	if err == nil || !strings.Contains(err.Error(), "SQLSTATE 42703") || !strings.Contains(err.Error(), "LINE 2:   nope FROM notes\n          ^") {
		t.Fatalf("sql error: %v", err)
	}
	if _, _, err := e.run("  ", "sql", prj); err == nil || !strings.Contains(err.Error(), "no query") {
		t.Fatalf("an empty query: %v", err)
	}
	out, _ = e.mustRun("", "tables", prj)
	if !strings.Contains(lineWith(out, "notes"), "public") || !strings.Contains(lineWith(out, "notes"), "table") {
		t.Fatalf("tables:\n%s", out)
	}
}
