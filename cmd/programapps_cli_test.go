package cmd

import (
	"strings"
	"testing"

	"github.com/theappliance/appliance/api"
)

// TestCLIProgramApplications: an operator mints (printed once), lists and revokes service tokens, lists
// applications by status, shows one, rejects one, and an approval with billing off is refused with the
// reason; an organization's owner is refused.
func TestCLIProgramApplications(t *testing.T) {
	e := setupCLI(t)
	e.login(t)
	op, err := e.svc.Tenancy().AddOperator(t.Context(), &api.AddOperatorRequest{Email: "ops@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	as := []string{"--email", "ops@example.com", "--password-stdin"}
	run := func(args ...string) (string, string) {
		t.Helper()
		return e.mustRun(op.Password, append(args, as...)...)
	}
	tok, stderr := run("service-tokens", "create", "www.example.com")
	tok = strings.TrimSpace(tok)
	if !strings.HasPrefix(tok, "svc_") || !strings.Contains(stderr, "shown only this once") {
		t.Fatalf("service-tokens create:\n%s\n%s", tok, stderr)
	}
	second, _ := run("service-tokens", "create", "old site")
	list, _ := run("service-tokens", "list")
	if !strings.Contains(list, "www.example.com") || !strings.Contains(list, "old site") || strings.Contains(list, tok) {
		t.Fatalf("service-tokens list:\n%s", list)
	}
	p, err := e.svc.ProgramApps().Authenticate(t.Context(), strings.TrimSpace(second))
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := run("service-tokens", "revoke", p.ServiceTokenID()); !strings.Contains(out, "Revoked service token "+p.ServiceTokenID()) {
		t.Fatalf("service-tokens revoke: %s", out)
	}
	if _, err := e.svc.ProgramApps().Authenticate(t.Context(), strings.TrimSpace(second)); err == nil {
		t.Fatal("a revoked token authenticates")
	}

	p, err = e.svc.ProgramApps().Authenticate(t.Context(), tok)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, email := range []string{"one@example.com", "two@example.com"} {
		r, err := e.svc.ProgramApps().Submit(t.Context(), p, &api.CreateProgramApplicationRequest{CompanyName: "Acme " + email, ContactName: "Ada",
			Email: email, Segment: "saas", UseCase: "testing", Program: "startup", TeamSize: 3})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ProgramApplication.ID)
	}
	out, _ := run("program-applications", "list", "--status", "received")
	if !strings.Contains(out, ids[0]) || !strings.Contains(out, ids[1]) {
		t.Fatalf("program-applications list:\n%s", out)
	}
	if out, _ := run("program-applications", "get", ids[0]); !strings.Contains(out, "one@example.com") || !strings.Contains(out, "received") {
		t.Fatalf("program-applications get:\n%s", out)
	}
	if out, _ := run("program-applications", "reject", ids[0], "--note", "not now"); !strings.Contains(out, "rejected") || !strings.Contains(out, "not now") {
		t.Fatalf("program-applications reject:\n%s", out)
	}
	if _, _, err := e.run(op.Password, append([]string{"program-applications", "approve", ids[1], "--percent-off", "30"}, as...)...); err == nil ||
		!strings.Contains(err.Error(), "billing is not configured") {
		t.Fatalf("approve with billing off: %v", err)
	}
	if _, _, err := e.run(op.Password, append([]string{"program-applications", "approve", ids[1]}, as...)...); err == nil ||
		!strings.Contains(err.Error(), "--percent-off is required") {
		t.Fatalf("approve without --percent-off: %v", err)
	}
	out, _ = run("program-applications", "list", "--status", "rejected")
	if !strings.Contains(out, ids[0]) || strings.Contains(out, ids[1]) {
		t.Fatalf("list rejected:\n%s", out)
	}
	if _, _, err := e.run(e.boot.Password, "program-applications", "list", "--email", e.boot.Email, "--password-stdin"); err == nil ||
		!strings.Contains(err.Error(), "platform operators") {
		t.Fatalf("an owner lists program applications: %v", err)
	}
}
