package cmd

import (
	"testing"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
)

// The Go side of ui/e2e/palette.mjs (run by TestDashboardEndToEnd).

// paletteInvite makes a person who belongs to no organization (added, then removed) and invites them back,
// answering "email password invitationID".
func paletteInvite(t *testing.T, e *cliEnv, p *appliance.Principal) string {
	const email = "invitee@example.com"
	org := e.boot.OrganizationID
	added, err := e.svc.Identity().AddMember(t.Context(), p, org, &api.AddMemberRequest{Email: email, Role: "member"})
	if err != nil {
		t.Fatalf("add the invitee: %v", err)
	}
	if _, err := e.svc.Identity().RemoveMember(t.Context(), p, org, added.Member.UserID); err != nil {
		t.Fatalf("remove the invitee: %v", err)
	}
	inv, err := e.svc.Identity().AddMember(t.Context(), p, org, &api.AddMemberRequest{Email: email, Role: "admin"})
	if err != nil || inv.Invitation == nil {
		t.Fatalf("invite: %v %+v", err, inv)
	}
	return email + " " + added.InitialPassword + " " + inv.Invitation.ID
}

// paletteJoined answers "admin" when the invitee is now a member with the invited role, else what is wrong.
func paletteJoined(t *testing.T, e *cliEnv, p *appliance.Principal) string {
	list, err := e.svc.Identity().ListMembers(t.Context(), p, e.boot.OrganizationID)
	if err != nil {
		return err.Error()
	}
	for _, m := range list.Members {
		if m.Email == "invitee@example.com" {
			return m.Role
		}
	}
	return "the invitee is not a member"
}
