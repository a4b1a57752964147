package cmd

import (
	"testing"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/store"
)

// plansStep answers ui/e2e/plans.mjs: "plans-member" and "plans-operator" make a member of the bootstrap
// organization and a platform operator and answer "EMAIL PASSWORD"; "plans-billing on|off" gives the bootstrap organization the billing
// fields a Stripe webhook would have set (on) or takes them away again (off, billing not configured, as
// this appliance runs); "plans-quota" checks the quota the page set (7 projects, 10 GiB); "plans-plan"
// checks the plan the page changed (pro: 150 connections).
func plansStep(t *testing.T, e *cliEnv, what, arg string) string {
	t.Helper()
	org := e.boot.OrganizationID
	switch what {
	case "plans-member", "plans-operator": // a new member of the organization, a new operator: "EMAIL PASSWORD"
		if what == "plans-operator" {
			res, err := e.svc.Tenancy().AddOperator(t.Context(), &api.AddOperatorRequest{Email: "plans-operator@example.com"})
			if err != nil {
				t.Fatalf("add operator: %v", err)
			}
			return res.Email + " " + res.Password
		}
		p, err := e.svc.Identity().Authenticate(t.Context(), e.boot.APIKey)
		if err != nil {
			t.Fatal(err)
		}
		added, err := e.svc.Identity().AddMember(t.Context(), p, org, &api.AddMemberRequest{Email: "billing-reader@example.com", Role: "member"})
		if err != nil {
			t.Fatalf("add a member: %v", err)
		}
		return added.Member.Email + " " + added.InitialPassword
	case "plans-billing":
		end := time.Date(2030, 1, 31, 12, 0, 0, 0, time.UTC)
		if err := e.env.DB.Update(func(tx *store.Tx) error {
			o, err := store.Organizations.Get(tx, org)
			if err != nil {
				return err
			}
			if arg == "on" {
				o.BillingProvider, o.BillingCustomerID, o.BillingStatus, o.BillingPlan, o.BillingPeriodEnd = "stripe", "cus_e2e", "active", "pro", &end
			} else {
				o.BillingProvider, o.BillingCustomerID, o.BillingStatus, o.BillingPlan, o.BillingPeriodEnd = "", "", "", "none", nil
			}
			return store.Organizations.Put(tx, o)
		}); err != nil {
			t.Fatalf("set the organization's billing: %v", err)
		}
	case "plans-quota":
		if err := e.env.DB.View(func(tx *store.Tx) error {
			q, err := store.OrganizationQuotas.Get(tx, org)
			if err != nil {
				return err
			}
			if q.ProjectsLimit != 7 || q.StorageLimitBytes != 10<<30 || q.PreviewsLimit != 50 {
				t.Errorf("the quota the page set: %+v", q)
			}
			return nil
		}); err != nil {
			t.Errorf("read the quota the page set: %v", err)
		}
	case "plans-plan":
		if p, ok := e.svc.PlanByName("pro"); !ok || p.MaxConnections != 150 || p.StorageLimitBytes != 10<<30 {
			t.Errorf("the plan the page changed: %+v", p)
		}
	default:
		t.Errorf("plans step %q", what)
	}
	return ""
}
