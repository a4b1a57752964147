package cmd

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/observe"
	"github.com/theappliance/appliance/scheduler"
)

// TestCLIObservability: appliance top ranks a slow statement and shows its detail, appliance logs prints a
// RAISE LOG line (and --follow prints one written after it started), appliance advisor prints a suggestion
// and the hygiene findings; bad flags come back as the API's 400.
func TestCLIObservability(t *testing.T) {
	e := setupCLI(t, cliSetupOpts{instances: true})
	p := e.login(t)
	prj := e.activeProject(t, p, "watched")
	var mu sync.Mutex
	now := time.Now().UTC()
	e.env.Clock.Set(func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	sweep := func() {
		t.Helper()
		mu.Lock()
		now = now.Add(observe.StatementSnapshotLate)
		mu.Unlock()
		if res, err := e.svc.Observe().Sample(t.Context()); err != nil || res.Projects != 1 {
			t.Fatalf("sweep: %+v %v", res, err)
		}
	}
	sweep()
	for _, ext := range []string{"pg_qualstats", "hypopg"} {
		res, err := e.svc.Extensions().Enable(t.Context(), p, prj, &api.ExtensionRequest{Name: ext})
		if err != nil {
			t.Fatal(err)
		}
		if j := e.env.WaitJob(t, res.Job.ID); j.State != scheduler.StateCompleted {
			t.Fatalf("enable %s: %s", ext, j.Error)
		}
	}
	e.mustRun("", "sql", prj, "CREATE TABLE orders (id bigserial PRIMARY KEY, customer int, note text); INSERT INTO orders (customer, note) SELECT g % 3000, 'n' FROM generate_series(1, 60000) g; CREATE INDEX orders_note ON orders (note); CREATE INDEX orders_note_id ON orders (note, id); ANALYZE orders")
	for i := range 60 {
		e.mustRun("", "sql", prj, "SELECT count(*), pg_sleep(0.001) FROM orders WHERE customer = "+strings.Repeat("1", 1+i%3))
	}
	sweep()

	out, _ := e.mustRun("", "top", prj)
	line := lineWith(out, "FROM orders WHERE customer")
	if line == "" || !strings.Contains(out, "HASH") {
		t.Fatalf("top:\n%s", out)
	}
	hash := strings.Fields(line)[0]
	if f := strings.Fields(line); len(hash) != 32 || f[1] != "60" {
		t.Fatalf("top line: %q", line)
	}
	out, _ = e.mustRun("", "top", prj, "--query", hash)
	if !strings.Contains(out, "calls 60") || !strings.Contains(out, "CALLS/S") {
		t.Fatalf("top --query:\n%s", out)
	}
	if _, _, err := e.run("", "top", prj, "--hours", "169"); err == nil || !strings.Contains(err.Error(), "between 1 and 168") {
		t.Fatalf("top --hours 169: %v", err)
	}

	e.mustRun("", "sql", prj, "DO $$ BEGIN RAISE LOG 'cli-marker-one'; END $$")
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, _ = e.mustRun("", "logs", prj, "--severity", "log")
		if strings.Contains(out, "LOG") && strings.Contains(out, "cli-marker-one") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("logs:\n%s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.run("", "sql", prj, "SELECT * FROM cli_missing_table") // fails: the server logs its error
	for {
		out, _ = e.mustRun("", "logs", prj, "--search", "CLI_MISSING", "--sqlstate", "42p01", "--from", time.Now().Add(-time.Hour).UTC().Format(time.RFC3339))
		if strings.Contains(out, `relation "cli_missing_table" does not exist`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("logs --search --sqlstate --from:\n%s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out, _ = e.mustRun("", "logs", prj, "--search", "cli_missing", "--user", "nobody"); strings.Contains(out, "cli_missing_table") {
		t.Fatalf("logs --user nobody:\n%s", out)
	}
	if _, _, err := e.run("", "logs", prj, "--from", "yesterday"); err == nil || !strings.Contains(err.Error(), "RFC 3339") {
		t.Fatalf("logs --from yesterday: %v", err)
	}
	if _, _, err := e.run("", "logs", prj, "--severity", "loud"); err == nil || !strings.Contains(err.Error(), "loud") {
		t.Fatalf("logs --severity loud: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	follow := e.startCtx(ctx, "", "logs", prj, "--follow", "--severity", "log", "--json")
	e.mustRun("", "sql", prj, "DO $$ BEGIN RAISE LOG 'cli-marker-two'; END $$")
	for !strings.Contains(follow.stdout.String(), "cli-marker-two") {
		if time.Now().After(deadline.Add(20 * time.Second)) {
			t.Fatalf("logs --follow:\n%s\n%s", follow.stdout, follow.stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	if err := follow.wait(t); err != nil {
		t.Fatalf("logs --follow ended with %v", err)
	}
	if !strings.Contains(lineWith(follow.stdout.String(), "cli-marker-two"), `"severity":"log"`) {
		t.Fatalf("logs --follow --json:\n%s", follow.stdout)
	}

	out, _ = e.mustRun("", "advisor", prj, "--min-filter", "100")
	if !strings.Contains(out, "CREATE INDEX") || !strings.Contains(out, "customer") || !strings.Contains(out, "redundant  orders_note") ||
		!strings.Contains(out, "DROP INDEX CONCURRENTLY") {
		t.Fatalf("advisor:\n%s", out)
	}
}
