package httpapi

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/theappliance/appliance/api"
)

// TestTypeScriptClient regenerates clients/typescript/src/schema.d.ts from the served document
// (openapi-typescript) and src/enums.ts (the values of each enum schema, enumsTS) and type-checks the client with ordinary code against it (src/check.ts): a stale
// client, or a document too loose for `data.job.id`, fails here. UPDATE_CLIENT=1 writes the new schema.
func TestTypeScriptClient(t *testing.T) {
	t.Parallel()
	npm, err := exec.LookPath("npm")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("npm is not installed: %v", err)
		}
		t.Skip("npm is not installed")
	}
	b := setup(t)
	src := filepath.Join("..", "clients", "typescript")
	work := t.TempDir()
	for _, name := range []string{"package.json", "package-lock.json", "tsconfig.json"} {
		data, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.CopyFS(filepath.Join(work, "src"), os.DirFS(filepath.Join(src, "src"))); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "openapi.json"), b.api.openapi, 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command(npm, args...)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "NO_UPDATE_NOTIFIER=1", "REDOCLY_TELEMETRY=off", "npm_config_fund=false", "npm_config_audit=false")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("ci", "--ignore-scripts")
	run("run", "generate")
	got, err := os.ReadFile(filepath.Join(work, "src", "schema.d.ts"))
	if err != nil {
		t.Fatal(err)
	}
	enums, err := enumsTS(b.api.openapi)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "src", "enums.ts"), enums, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string][]byte{"schema.d.ts": got, "enums.ts": enums} {
		committed := filepath.Join(src, "src", name)
		if os.Getenv("UPDATE_CLIENT") != "" {
			if err := os.WriteFile(committed, got, 0o644); err != nil {
				t.Fatal(err)
			}
		} else if want, _ := os.ReadFile(committed); string(want) != string(got) {
			t.Errorf("clients/typescript/src/%s is stale: run UPDATE_CLIENT=1 go test ./httpapi -run TestTypeScriptClient", name)
		}
	}
	run("run", "typecheck")

	// What a JavaScript client reads of a query_id the server sends (JSON.parse, as openapi-fetch does) is
	// the exact value, which its type (a string, checked by src/check.ts) carries on.
	body, err := json.Marshal(api.ObservabilitySnapshot{SlowQueries: []api.Statement{{QueryID: bigQueryID}}})
	if err != nil {
		t.Fatal(err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(node, "-e", "process.stdout.write(String(JSON.parse(process.argv[1]).slow_queries[0].query_id))", string(body)).CombinedOutput()
	if err != nil || string(out) != strconv.FormatInt(bigQueryID, 10) {
		t.Errorf("JavaScript reads query_id %s (%v) of %s, want %d", out, err, body, bigQueryID)
	}
}

// enumsTS is clients/typescript/src/enums.ts: for each component schema of the document that is a string
// enum (EventType …), an exported array of its values, typed by schema.d.ts, so that a client (the
// dashboard's webhook form) lists the values from the API, never from a list of its own.
func enumsTS(doc []byte) ([]byte, error) {
	var d struct {
		Components struct {
			Schemas map[string]struct {
				Type any      `json:"type"`
				Enum []string `json:"enum"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, fmt.Errorf("read the document: %w", err)
	}
	var names []string
	for name, s := range d.Components.Schemas {
		if s.Type == "string" && len(s.Enum) > 0 {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("// Generated from /v1/openapi.json by TestTypeScriptClient (UPDATE_CLIENT=1 go test ./httpapi -run\n" +
		"// TestTypeScriptClient): the values of each enum schema of the document. Do not edit.\n" +
		"import type { components } from './schema'\n")
	for _, name := range names {
		values, err := json.Marshal(d.Components.Schemas[name].Enum)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "\n/** The values of %s, in the document's order. */\nexport const %sValues = %s as const satisfies readonly components['schemas']['%s'][]\n",
			name, name, values, name)
	}
	return []byte(b.String()), nil
}
