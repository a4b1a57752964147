package cmd

import (
	"testing"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/store"
)

// programsStep answers ui/e2e/programs.mjs: "programs-submit TOKEN" submits two applications with the
// service token the page minted (the public website's part); "programs-rejected EMAIL" checks that the
// store holds that application rejected by the operator with the page's note, and the other still
// received (the approval the page tried without a billing provider changed nothing); "programs-revoked
// TOKEN" checks that the token the page revoked authenticates no more.
func programsStep(t *testing.T, e *cliEnv, what, arg string) string {
	t.Helper()
	apps := e.svc.ProgramApps()
	switch what {
	case "programs-submit":
		p, err := apps.Authenticate(t.Context(), arg)
		if err != nil {
			t.Fatalf("the service token the page showed: %v", err)
		}
		for _, a := range []api.CreateProgramApplicationRequest{
			{CompanyName: "Initech", ContactName: "Bill Lumbergh", Email: "bill@initech.example", Segment: "fintech", UseCase: "Ledger of TPS reports.", Program: "startup", TeamSize: 12},
			{CompanyName: "Hooli", ContactName: "Gavin Belson", Email: "hr@hooli.example", Segment: "search", UseCase: "Compression benchmarks.", Program: "partner", TeamSize: 900},
		} {
			if _, err := apps.Submit(t.Context(), p, &a); err != nil {
				t.Fatalf("submit %s: %v", a.CompanyName, err)
			}
		}
	case "programs-rejected":
		if err := e.env.DB.View(func(tx *store.Tx) error {
			all, err := store.ProgramApplications.All(tx, nil)
			for _, a := range all {
				switch {
				case a.Email == arg && (a.Status != api.ProgramApplicationRejected || a.OperatorNote != "Not a startup any more." || a.DecidedByUserID == "" || a.DecidedAt == nil):
					t.Errorf("the application the page rejected: %+v", a)
				case a.Email != arg && (a.Status != api.ProgramApplicationReceived || a.DiscountID != ""):
					t.Errorf("the application whose approval was refused changed: %+v", a)
				}
			}
			if len(all) != 2 {
				t.Errorf("%d applications stored, want 2", len(all))
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
	case "programs-revoked":
		if _, err := apps.Authenticate(t.Context(), arg); err == nil {
			t.Fatal("the service token the page revoked still authenticates")
		}
	default:
		t.Fatalf("programs: unknown step %s", what)
	}
	return ""
}
