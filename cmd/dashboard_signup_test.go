package cmd

import (
	"testing"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/store"
)

// signupStep answers ui/e2e/signup.mjs: "signup-mode MODE" sets who may sign up, as up --signup does;
// "signup-referral SLUG" checks that the organization SLUG signed up with Initech's code: a pending
// referral of Initech's; "signup-owner-invite NOTE" checks that Initech's owner minted a pending invite
// with that note on Initech's behalf; "signup-operator" makes a platform operator and answers "EMAIL
// PASSWORD".
func signupStep(t *testing.T, e *cliEnv, what, arg string) string {
	t.Helper()
	switch what {
	case "signup-operator":
		res, err := e.svc.Tenancy().AddOperator(t.Context(), &api.AddOperatorRequest{Email: "referrals-operator@example.com", Name: "Rita Referrals"})
		if err != nil {
			t.Fatalf("add operator: %v", err)
		}
		return res.Email + " " + res.Password
	case "signup-owner-invite":
		if err := e.env.DB.View(func(tx *store.Tx) error {
			initech, err := store.Organizations.First(tx, store.OrganizationsBySlug, "initech")
			if err != nil {
				return err
			}
			invs, err := store.SignupInvites.Lookup(tx, store.SignupInvitesByOrg, initech.ID, store.Query{})
			if err != nil {
				return err
			}
			if len(invs) != 1 || invs[0].Note != arg || invs[0].UsedAt != nil || invs[0].RevokedAt != nil {
				t.Errorf("Initech's sign-up invites after its owner minted one: %+v", invs)
			}
			return nil
		}); err != nil {
			t.Fatalf("read Initech's invites: %v", err)
		}
		return ""
	case "signup-mode", "signup-referral":
	default:
		t.Fatalf("unknown step %s", what)
	}
	if what == "signup-mode" {
		if err := e.svc.Tenancy().SetSignupMode(arg); err != nil {
			t.Fatalf("sign-up mode %s: %v", arg, err)
		}
		return arg
	}
	if err := e.env.DB.View(func(tx *store.Tx) error {
		referred, err := store.Organizations.First(tx, store.OrganizationsBySlug, arg)
		if err != nil {
			return err
		}
		referrer, err := store.Organizations.First(tx, store.OrganizationsBySlug, "initech")
		if err != nil {
			return err
		}
		refs, err := store.Referrals.Lookup(tx, store.ReferralsByReferred, referred.ID, store.Query{})
		if err != nil {
			return err
		}
		if len(refs) != 1 || refs[0].Status != api.ReferralPending || refs[0].ReferrerOrganizationID != referrer.ID {
			t.Errorf("the referral of %s after its sign-up through Initech's link: %+v", arg, refs)
		}
		return nil
	}); err != nil {
		t.Fatalf("read the referral of %s: %v", arg, err)
	}
	return ""
}
