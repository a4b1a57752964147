package httpapi

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTypeScriptClient regenerates clients/typescript/src/schema.d.ts from the served document
// (openapi-typescript) and type-checks the client with ordinary code against it (src/check.ts): a stale
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
	committed := filepath.Join(src, "src", "schema.d.ts")
	if os.Getenv("UPDATE_CLIENT") != "" {
		if err := os.WriteFile(committed, got, 0o644); err != nil {
			t.Fatal(err)
		}
	} else if want, _ := os.ReadFile(committed); string(want) != string(got) {
		t.Errorf("clients/typescript/src/schema.d.ts is stale: run UPDATE_CLIENT=1 go test ./httpapi -run TestTypeScriptClient")
	}
	run("run", "typecheck")
}
