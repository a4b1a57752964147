package cmd

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/node"
)

// TestCLIPlansAndQuotas: `plans list` with the login's key; an operator sets (a new plan needs every
// flag; a change keeps the flags not given) and deletes plans, and sets an organization's quota with
// `orgs quota`, which `orgs list` shows. `up --plans FILE` is checked before the start (an unknown key, a
// size too small, no free plan: errors naming the field) and replaces the plans at the start.
func TestCLIPlansAndQuotas(t *testing.T) {
	e := setupCLI(t)
	e.login(t)
	added, err := e.svc.Tenancy().AddOperator(t.Context(), &api.AddOperatorRequest{Email: "plans@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	as := []string{"--email", "plans@example.com", "--password-stdin"}
	op := func(args ...string) (string, string, error) { return e.run(added.Password, append(args, as...)...) }

	if out, _ := e.mustRun("", "plans", "list"); !strings.Contains(lineWith(out, "pro"), "100") || !strings.Contains(out, "scale") {
		t.Fatalf("plans list:\n%s", out)
	}
	if _, _, err := op("plans", "set", "team", "--max-connections", "40"); err == nil || !strings.Contains(err.Error(), "--storage-limit-bytes is required") {
		t.Fatalf("plans set of a new plan without every flag: %v", err)
	}
	if out, _, err := op("plans", "set", "team", "--max-connections", "40", "--storage-limit-bytes", "2147483648", "--kv-memory-mb", "64",
		"--previews-limit", "3", "--ai-uses-per-month", "100", "--memory-bytes", "1073741824", "--cpu-cores", "1"); err != nil || !strings.Contains(out, "Created plan team") {
		t.Fatalf("plans set a new plan: %s %v", out, err)
	}
	if out, _, err := op("plans", "set", "pro", "--max-connections", "150"); err != nil || !strings.Contains(out, "Changed plan pro") {
		t.Fatalf("plans set pro: %s %v", out, err)
	}
	if _, _, err := op("plans", "set", "pro", "--cpu-cores", "0"); err == nil || !strings.Contains(err.Error(), "cpu_cores") {
		t.Fatalf("plans set a bad value: %v", err)
	}
	out, _ := e.mustRun("", "plans", "list")
	if pro := strings.Fields(lineWith(out, "pro")); len(pro) < 2 || pro[1] != "150" || !strings.Contains(out, "team") {
		t.Fatalf("plans list after the changes:\n%s", out)
	}
	if out, _, err := op("plans", "delete", "scale"); err != nil || !strings.Contains(out, "Deleted plan scale") {
		t.Fatalf("plans delete: %s %v", out, err)
	}
	if _, _, err := op("plans", "delete", "free"); err == nil || !strings.Contains(err.Error(), "cannot be deleted") {
		t.Fatalf("plans delete free: %v", err)
	}
	if _, _, err := e.run(e.boot.Password, "plans", "delete", "team", "--email", e.boot.Email, "--password-stdin"); err == nil || !strings.Contains(err.Error(), "platform operators") {
		t.Fatalf("plans delete by an organization owner: %v", err)
	}

	org := e.boot.OrganizationID
	if out, _, err := op("orgs", "quota", org, "--projects", "7", "--storage-limit-bytes", "10737418240"); err != nil || !strings.Contains(out, "7 project(s), 50 preview(s), 10.0 GiB of storage (its own quota)") {
		t.Fatalf("orgs quota: %s %v", out, err)
	}
	if _, _, err := op("orgs", "quota", org); err == nil || !strings.Contains(err.Error(), "give --projects") {
		t.Fatalf("orgs quota with nothing to set: %v", err)
	}
	if _, _, err := op("orgs", "quota", org, "--projects", "-1"); err == nil || !strings.Contains(err.Error(), "projects_limit") {
		t.Fatalf("orgs quota with a negative limit: %v", err)
	}
	if out, _, err := op("orgs", "list"); err != nil || !strings.Contains(lineWith(out, org), "7 projects, 50 previews") {
		t.Fatalf("orgs list shows the quota: %s %v", out, err)
	}
	if out, _, err := op("orgs", "quota", org, "--default"); err != nil || !strings.Contains(out, "(the default quota)") {
		t.Fatalf("orgs quota --default: %s %v", out, err)
	}

	// up --plans: checked as a flag, then put in force at the start.
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	plan := `{"name": "free", "max_connections": 25, "storage_limit_bytes": 2147483648, "kv_memory_mb": 48, "previews_limit": 1, "ai_uses_per_month": 10, "memory_bytes": 536870912, "cpu_cores": 0.5}`
	quota := `"organization_quota": {"projects_limit": 9, "previews_limit": 4, "storage_limit_bytes": 10737418240}`
	for body, want := range map[string]string{
		`{"plans": [` + plan + `], ` + quota + `, "extra": 1}`:                                                                  `unknown field "extra"`,
		`{"plans": [` + strings.Replace(plan, `"max_connections": 25`, `"max_connections": 0`, 1) + `], ` + quota + `}`:         "plans[0].max_connections must be at least 10",
		`{"plans": [` + strings.Replace(plan, `"free"`, `"tiny"`, 1) + `], ` + quota + `}`:                                      `the "free" plan is missing`,
		`{"plans": [` + plan + `], "organization_quota": {"projects_limit": 1, "previews_limit": 1, "storage_limit_bytes": 0}}`: "organization_quota.storage_limit_bytes must be positive",
	} {
		p := write("bad.json", body)
		var err error
		for _, fl := range upFlagTable(&UpConfig{PlansFile: p}) {
			if fl.name == "plans" {
				err = fl.check()
			}
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--plans with %s: %v, want %q", body, err, want)
		}
	}
	// A plan a project is on cannot vanish from the file.
	if _, _, err := e.run("", "projects", "create", "on-team", "--plan", "team"); err != nil {
		t.Fatalf("create a project on plan team: %v", err)
	}
	good := write("plans.json", `{"plans": [`+plan+`], `+quota+`}`)
	var upOut bytes.Buffer
	if err := node.ApplyPlansFile(t.Context(), e.svc, good, &upOut); err == nil || !strings.Contains(err.Error(), "the file has no plan team") {
		t.Fatalf("--plans without the plan of a project: %v", err)
	}
	good = write("plans.json", `{"plans": [`+plan+`, `+strings.Replace(plan, `"free"`, `"team"`, 1)+`], `+quota+`}`)
	if err := node.ApplyPlansFile(t.Context(), e.svc, good, &upOut); err != nil {
		t.Fatalf("--plans: %v", err)
	}
	if !strings.Contains(upOut.String(), "Plans: 2 plan(s)") {
		t.Fatalf("up's output: %s", upOut.String())
	}
	ps := e.svc.Tenancy().Plans()
	if len(ps) != 2 || ps[0].MaxConnections != 25 {
		t.Fatalf("the plans after --plans: %+v", ps)
	}
	if out, _, err := op("orgs", "list"); err != nil || !strings.Contains(lineWith(out, org), "9 projects, 4 previews") {
		t.Fatalf("the default quota after --plans: %s %v", out, err)
	}
}
