package cmd

import (
	"fmt"
	"net/http"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/theappliance/appliance/api"
)

// The sign-up invites (up --signup invite): the platform operators' (every invite), or with --org an
// organization owner's (their organization's); each command signs in as you, as the orgs commands do.
var _ = registerClientGroup("signup-invites", []string{"signup-invite"}, "Sign-up invite links (up --signup invite) — create, list, revoke: platform operators, or an organization's owner with --org (signs in as you)",
	newSignupInvitesCreateCmd, newSignupInvitesListCmd, newSignupInvitesRevokeCmd)

// signupInvitesPath is the operators' invites, or organization org's (its owners').
func signupInvitesPath(org string) string {
	if org == "" {
		return "/v1/signup-invites"
	}
	return "/v1/organizations/" + seg(org) + "/signup-invites"
}

// inviteOrgFlag adds --org to an invite command.
func inviteOrgFlag(f *pflag.FlagSet, org *string) {
	f.StringVar(org, "org", "", "the organization whose invites these are (you must be its owner; default: the operators' invites)")
}

func newSignupInvitesCreateCmd(o *clientOpts) *cobra.Command {
	var (
		req api.CreateSignupInviteRequest
		org string
	)
	return signedInCmd(o, apiCmd[api.CreatedSignupInvite]{
		Use:   "create",
		Short: "Mint a sign-up invite: a single-use link to the dashboard's sign-up page (printed once)",
		Long: `Mint a sign-up invite. The link, printed alone on standard output, opens the dashboard's sign-up page
with the invite's secret token: whoever holds it makes one organization (with --for, only that e-mail
may). It expires after --hours (default 168, at most 720) and is shown only this once. With --org, an
organization's owner mints it on the organization's behalf: the person signing up with it still gets a new
organization of their own.`,
		Example: `  appliance signup-invites create --for dana@acme.example --note "Acme trial" --email operator@example.com
  appliance signup-invites create --org org_123 --note "a friend" --email owner@acme.example`,
		Args: cobra.NoArgs, JSON: true, Method: http.MethodPost,
		Flags: func(f *pflag.FlagSet) {
			f.StringVar(&req.Email, "for", "", "restrict the invite to this e-mail address")
			f.StringVar(&req.Note, "note", "", "who it is for (shown in the list)")
			f.IntVar(&req.ExpiresInHours, "hours", 0, "hours until it expires, 1 to 720 (default 168)")
			inviteOrgFlag(f, &org)
		},
		Path: func(*call) string { return signupInvitesPath(org) },
		Body: func(*call) any { return &req },
		Print: func(x *call, r *api.CreatedSignupInvite) error {
			inv := r.SignupInvite
			who := "anyone holding the link"
			if inv.Email != "" {
				who = inv.Email
			}
			fmt.Fprintf(x.c.ErrOrStderr(), "Sign-up invite %s for %s, valid until %s. The link follows; it is shown only this once.\n", inv.ID, who, stamp(inv.ExpiresAt))
			return x.printf("%s\n", r.URL)
		},
	})
}

func newSignupInvitesListCmd(o *clientOpts) *cobra.Command {
	var org string
	return signedInCmd(o, apiCmd[api.SignupInviteList]{
		Use: "list", Aliases: []string{"ls"}, Short: "List the sign-up invites (with --org, the organization's), newest first", JSON: true,
		Flags:   func(f *pflag.FlagSet) { inviteOrgFlag(f, &org) },
		Path:    func(*call) string { return signupInvitesPath(org) },
		Columns: []string{"ID", "STATE", "FOR", "NOTE", "EXPIRES", "ORGANIZATION", "CREATED"},
		Rows: func(l *api.SignupInviteList) [][]string {
			return rowsOf(l.SignupInvites, func(inv *api.SignupInvite) []string {
				return []string{inv.ID, inv.State, firstNonEmpty(inv.Email, "-"), firstNonEmpty(inv.Note, "-"), stamp(inv.ExpiresAt), firstNonEmpty(inv.OrganizationID, "-"), stamp(inv.CreatedAt)}
			})
		},
	})
}

func newSignupInvitesRevokeCmd(o *clientOpts) *cobra.Command {
	var org string
	return signedInCmd(o, apiCmd[api.SignupInviteResponse]{
		Use: "revoke INVITE_ID", Short: "Revoke a sign-up invite (its link stops working)",
		Args: cobra.ExactArgs(1), JSON: true, Method: http.MethodDelete,
		Flags: func(f *pflag.FlagSet) { inviteOrgFlag(f, &org) },
		Path:  func(x *call) string { return signupInvitesPath(org) + "/" + seg(x.args[0]) },
		Print: func(x *call, r *api.SignupInviteResponse) error {
			return x.printf("Sign-up invite %s revoked.\n", r.SignupInvite.ID)
		},
	})
}
