package cmd

import (
	"testing"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/store"
)

// operatorStep answers ui/e2e/operator.mjs: "operator" makes a platform operator (as root would) and
// answers "EMAIL PASSWORD"; "operator-suspended SLUG" checks that the store holds the organization
// suspended with the reason the page typed, and answers its ID.
func operatorStep(t *testing.T, e *cliEnv, what, arg string) string {
	t.Helper()
	if what == "operator" {
		res, err := e.svc.Tenancy().AddOperator(t.Context(), &api.AddOperatorRequest{Email: "operator@example.com", Name: "Olga Operator"})
		if err != nil {
			t.Fatalf("add operator: %v", err)
		}
		return res.Email + " " + res.Password
	}
	var id string
	if err := e.env.DB.View(func(tx *store.Tx) error {
		org, err := store.Organizations.First(tx, store.OrganizationsBySlug, arg)
		if err != nil {
			return err
		}
		if org.SuspendedAt == nil || org.SuspendedReason != "unpaid invoice" {
			t.Errorf("organization %s after the page suspended it: %+v", arg, org)
		}
		id = org.ID
		return nil
	}); err != nil {
		t.Fatalf("read organization %s: %v", arg, err)
	}
	return id
}
