package cmd

import (
	"strings"
	"testing"

	"github.com/theappliance/appliance/api"
)

// TestCLISignupInvites: an operator mints a sign-up invite (its link alone on standard output), lists it,
// revokes it (twice: the second is refused); an organization's owner is refused the operators' invites,
// and with --org mints, lists and revokes the organization's own.
func TestCLISignupInvites(t *testing.T) {
	e := setupCLI(t)
	e.login(t)
	added, err := e.svc.Tenancy().AddOperator(t.Context(), &api.AddOperatorRequest{Email: "ops@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	as := []string{"--email", "ops@example.com", "--password-stdin"}
	run := func(args ...string) (string, string) {
		return e.mustRun(added.Password, append(append([]string{"signup-invites"}, args...), as...)...)
	}
	link, stderr := run("create", "--for", "dana@acme.example", "--note", "Acme trial", "--hours", "48")
	link = strings.TrimSpace(link)
	if !strings.Contains(link, "/signup?invite=sgi_") || !strings.Contains(stderr, "for dana@acme.example") {
		t.Fatalf("create:\n%s\n%s", link, stderr)
	}
	list, _ := run("list")
	if !strings.Contains(list, "pending") || !strings.Contains(list, "dana@acme.example") || !strings.Contains(list, "Acme trial") {
		t.Fatalf("list:\n%s", list)
	}
	id := strings.Fields(strings.Split(strings.TrimSpace(list), "\n")[1])[0]
	if out, _ := run("revoke", id); !strings.Contains(out, "revoked") {
		t.Fatalf("revoke: %s", out)
	}
	if list, _ := run("list"); !strings.Contains(list, "revoked") {
		t.Fatalf("list after revoke:\n%s", list)
	}
	if _, _, err := e.run(added.Password, append([]string{"signup-invites", "revoke", id}, as...)...); err == nil || !strings.Contains(err.Error(), "revoked already") {
		t.Fatalf("revoke twice: %v", err)
	}
	if _, _, err := e.run("", "signup-invites", "create", "--hours", "1000000", "--email", "ops@example.com", "--password-stdin"); err == nil {
		t.Fatal("create with a wrong password or too many hours succeeded")
	}
	if _, _, err := e.run(added.Password, append([]string{"signup-invites", "create", "--hours", "100000"}, as...)...); err == nil || !strings.Contains(err.Error(), "expires_in_hours") {
		t.Fatalf("create for 100000 hours: %v", err)
	}

	// The organization's owner: not the operators' invites; its organization's with --org.
	owner := []string{"--email", e.boot.Email, "--password-stdin"}
	if _, _, err := e.run(e.boot.Password, append([]string{"signup-invites", "list"}, owner...)...); err == nil || !strings.Contains(err.Error(), "platform operators") {
		t.Fatalf("the owner lists the operators' invites: %v", err)
	}
	orun := func(args ...string) (string, string) {
		return e.mustRun(e.boot.Password, append(append([]string{"signup-invites"}, args...), owner...)...)
	}
	olink, _ := orun("create", "--org", e.boot.OrganizationID, "--note", "a friend")
	if !strings.Contains(olink, "/signup?invite=sgi_") {
		t.Fatalf("the owner's create: %s", olink)
	}
	olist, _ := orun("list", "--org", e.boot.OrganizationID)
	if rows := strings.Split(strings.TrimSpace(olist), "\n"); len(rows) != 2 || !strings.Contains(olist, "a friend") || strings.Contains(olist, "Acme trial") {
		t.Fatalf("the owner's list (its one invite, not the operator's):\n%s", olist)
	}
	oid := strings.Fields(strings.Split(strings.TrimSpace(olist), "\n")[1])[0]
	if out, _ := orun("revoke", "--org", e.boot.OrganizationID, oid); !strings.Contains(out, "revoked") {
		t.Fatalf("the owner's revoke: %s", out)
	}
}
