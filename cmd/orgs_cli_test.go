package cmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/node"
	"github.com/theappliance/appliance/store"
)

// TestCLIOperatorsAndOrgs: `operators add` makes an operator through up's admin socket while the
// appliance runs, and on the metadata store of a stopped one; the operator then creates, lists,
// suspends, resumes and deletes organizations with `orgs`, signed in; an organization's owner is refused.
func TestCLIOperatorsAndOrgs(t *testing.T) {
	e := setupCLI(t)
	e.login(t)

	// A running appliance: its admin socket.
	dir := t.TempDir()
	stopSock, err := node.ServeOperatorSocket(e.svc, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopSock(t.Context()) })
	if st, err := os.Stat(filepath.Join(dir, node.OperatorSocket)); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("admin socket: %v %v", st, err)
	}
	password, stderr := e.mustRun("", "operators", "add", "ops@example.com", "--data-dir", dir)
	password = strings.TrimSpace(password)
	if len(password) < 12 || !strings.Contains(stderr, "a platform operator") {
		t.Fatalf("operators add:\nstdout: %s\nstderr: %s", password, stderr)
	}
	if out, stderr := e.mustRun("", "operators", "add", "ops@example.com", "--data-dir", dir); out != "" || !strings.Contains(stderr, "is a platform operator") {
		t.Fatalf("operators add again: %q %q", out, stderr)
	}
	if _, _, err := e.run("", "operators", "add", "not an email", "--data-dir", dir); err == nil || !strings.Contains(err.Error(), "not a valid address") {
		t.Fatalf("operators add with a bad email: %v", err)
	}

	// A stopped appliance: its store, written directly.
	stopped := t.TempDir()
	db, err := store.Open(node.MetaFile(stopped))
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := appliance.OpenSecretBox(filepath.Join(stopped, "secret.key")); err != nil {
		t.Fatal(err)
	}
	if out, _ := e.mustRun("", "operators", "add", "night@example.com", "--data-dir", stopped); strings.TrimSpace(out) == "" {
		t.Fatal("operators add on a stopped appliance printed no password")
	}
	if db, err = store.Open(node.MetaFile(stopped)); err != nil {
		t.Fatal(err)
	}
	if err := db.View(func(tx *store.Tx) error {
		u, err := store.Users.First(tx, store.UsersByEmail, "night@example.com")
		if err == nil && !u.IsAdmin {
			t.Errorf("user %s is no operator", u.ID)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, _, err := e.run("", "operators", "add", "x@example.com", "--data-dir", t.TempDir()); err == nil || !strings.Contains(err.Error(), "holds no appliance") {
		t.Fatalf("operators add on an empty directory: %v", err)
	}

	as := []string{"--email", "ops@example.com", "--password-stdin"}
	orgs := func(args ...string) (string, string) {
		return e.mustRun(password, append(append([]string{"orgs"}, args...), as...)...)
	}
	owner, stderr := orgs("create", "Acme Corp", "--owner", "dana@acme.example")
	if strings.TrimSpace(owner) == "" || !strings.Contains(stderr, "slug acme-corp") || !strings.Contains(stderr, "Owner: dana@acme.example") {
		t.Fatalf("orgs create:\n%s\n%s", owner, stderr)
	}
	var id string
	list, _ := orgs("list")
	for _, line := range strings.Split(list, "\n") {
		if strings.Contains(line, "acme-corp") {
			id = strings.Fields(line)[0]
		}
	}
	if id == "" || !strings.Contains(list, e.boot.OrganizationID) {
		t.Fatalf("orgs list:\n%s", list)
	}
	if out, _ := orgs("suspend", id, "--reason", "unpaid invoice"); !strings.Contains(out, "suspended (unpaid invoice); 0 project job(s)") {
		t.Fatalf("orgs suspend: %s", out)
	}
	if list, _ := orgs("list"); !strings.Contains(lineWith(list, id), "unpaid invoice") {
		t.Fatalf("orgs list after the suspension:\n%s", list)
	}
	if _, _, err := e.run(password, "orgs", "suspend", id, "--email", "ops@example.com", "--password-stdin"); err == nil || !strings.Contains(err.Error(), "--reason is required") {
		t.Fatalf("orgs suspend without a reason: %v", err)
	}
	if out, _ := orgs("resume", id); !strings.Contains(out, "resumed") {
		t.Fatalf("orgs resume: %s", out)
	}
	if _, _, err := e.run(password, "orgs", "delete", id, "--email", "ops@example.com", "--password-stdin"); err == nil || !strings.Contains(err.Error(), "--confirm") {
		t.Fatalf("orgs delete without --confirm: %v", err)
	}
	if out, _ := orgs("delete", id, "--confirm"); !strings.Contains(out, "ended 1 membership(s)") {
		t.Fatalf("orgs delete: %s", out)
	}
	// The organization's owner is no operator.
	if _, _, err := e.run(e.boot.Password, "orgs", "list", "--email", e.boot.Email, "--password-stdin"); err == nil || !strings.Contains(err.Error(), "platform operators") {
		t.Fatalf("orgs list by an organization owner: %v", err)
	}
}
