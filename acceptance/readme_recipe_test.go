package acceptance

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/daemon"
)

// recipeDir is the README's Node/TypeScript recipe as an npm project.
const recipeDir = "../testdata/node-recipe"

// TestReadmeNodeRecipe runs the README's Node/TypeScript recipe as its user would: the README shows
// testdata/node-recipe's global-setup.ts and recipe.test.ts verbatim (UPDATE_DOCS=1 rewrites that
// section), and in a copy of the project (beside a copy of clients/typescript, which its package.json
// names by a relative path) `npm ci`, `npm run typecheck` and `npm test` run with the built binary first on
// PATH: the setup starts `appliance up --ephemeral --exit-with-parent`, reads its JSON line, creates a
// project with the shipped TypeScript client, and the test queries it with pg. Afterwards nothing of the
// appliance is left: no directory in its parent directory, no process.
func TestReadmeNodeRecipe(t *testing.T) {
	var section strings.Builder
	for _, name := range []string{"global-setup.ts", "recipe.test.ts"} {
		b, err := os.ReadFile(filepath.Join(recipeDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if section.Len() > 0 {
			section.WriteString("\n")
		}
		section.WriteString("```ts\n" + string(b) + "```\n")
	}
	appliancetest.DocSection(t, "../README.md",
		"<!-- node-recipe:begin (testdata/node-recipe/global-setup.ts and recipe.test.ts: UPDATE_DOCS=1 go test ./acceptance -run TestReadmeNodeRecipe) -->\n",
		"<!-- node-recipe:end -->\n", section.String(), "UPDATE_DOCS=1 go test ./acceptance -run TestReadmeNodeRecipe")

	work := t.TempDir()
	project := filepath.Join(work, "testdata", "node-recipe")
	if err := os.CopyFS(filepath.Join(work, "clients", "typescript"), os.DirFS(filepath.Join("..", "clients", "typescript"))); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(project, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(recipeDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() { // node_modules of a local install
			continue
		}
		b, err := os.ReadFile(filepath.Join(recipeDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(project, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := e2eBuild(t)
	parent := appliancetest.TraversableTempDir(t) // where up --ephemeral makes its directory
	env := append(os.Environ(), "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"), "NO_UPDATE_NOTIFIER=1",
		"npm_config_fund=false", "npm_config_audit=false", "APPLIANCE_DATA_DIR="+parent, "APPLIANCE_NO_INSTALL=1", "APPLIANCE_LOG_LEVEL=warn")
	npm := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), "npm", args...)
		cmd.Dir, cmd.Env = project, env
		var stderr e2eBuffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("npm %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out, stderr.String())
		}
		return string(out)
	}
	npm("ci", "--ignore-scripts")
	npm("run", "typecheck")
	out := npm("test", "--silent")

	lines := strings.Split(strings.TrimSpace(out), "\n")
	var row struct {
		User   string `json:"user"`
		Answer int    `json:"answer"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &row); err != nil || row.User == "" || row.Answer != 42 {
		t.Fatalf("the recipe's query printed %q (%v), want {\"user\":<the project's role>,\"answer\":42}", out, err)
	}
	left, err := os.ReadDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		t.Errorf("after the teardown %s is left in %s", e.Name(), parent)
	}
	for _, dir := range []string{parent, filepath.Dir(bin)} {
		for pid, cmd := range daemon.ProcessesUnder(dir) {
			t.Errorf("after the teardown process %s (pid %s) runs", cmd, strconv.Itoa(pid))
		}
	}
}
