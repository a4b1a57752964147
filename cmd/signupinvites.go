package cmd

import (
	"fmt"
	"net/http"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/theappliance/appliance/api"
)

// The platform operators' sign-up invites (up --signup invite): each command signs in as the operator, as
// the orgs commands do.
var _ = registerClientGroup("signup-invites", []string{"signup-invite"}, "Platform operators: sign-up invite links (up --signup invite) — create, list, revoke (signs in as you)",
	newSignupInvitesCreateCmd, newSignupInvitesListCmd, newSignupInvitesRevokeCmd)

const signupInvitesPath = "/v1/signup-invites"

func newSignupInvitesCreateCmd(o *clientOpts) *cobra.Command {
	var req api.CreateSignupInviteRequest
	return signedInCmd(o, apiCmd[api.CreatedSignupInvite]{
		Use:   "create",
		Short: "Mint a sign-up invite: a single-use link to the dashboard's sign-up page (printed once)",
		Long: `Mint a sign-up invite. The link, printed alone on standard output, opens the dashboard's sign-up page
with the invite's secret token: whoever holds it makes one organization (with --for, only that e-mail
may). It expires after --hours (default 168, at most 720) and is shown only this once.`,
		Example: `  appliance signup-invites create --for dana@acme.example --note "Acme trial" --email operator@example.com`,
		Args:    cobra.NoArgs, JSON: true, Method: http.MethodPost,
		Flags: func(f *pflag.FlagSet) {
			f.StringVar(&req.Email, "for", "", "restrict the invite to this e-mail address")
			f.StringVar(&req.Note, "note", "", "who it is for (shown in the list)")
			f.IntVar(&req.ExpiresInHours, "hours", 0, "hours until it expires, 1 to 720 (default 168)")
		},
		Path: func(*call) string { return signupInvitesPath },
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
	return signedInCmd(o, apiCmd[api.SignupInviteList]{
		Use: "list", Aliases: []string{"ls"}, Short: "List the sign-up invites, newest first", JSON: true,
		Path:    func(*call) string { return signupInvitesPath },
		Columns: []string{"ID", "STATE", "FOR", "NOTE", "EXPIRES", "ORGANIZATION", "CREATED"},
		Rows: func(l *api.SignupInviteList) [][]string {
			return rowsOf(l.SignupInvites, func(inv *api.SignupInvite) []string {
				return []string{inv.ID, inv.State, firstNonEmpty(inv.Email, "-"), firstNonEmpty(inv.Note, "-"), stamp(inv.ExpiresAt), firstNonEmpty(inv.OrganizationID, "-"), stamp(inv.CreatedAt)}
			})
		},
	})
}

func newSignupInvitesRevokeCmd(o *clientOpts) *cobra.Command {
	return signedInCmd(o, apiCmd[api.SignupInviteResponse]{
		Use: "revoke INVITE_ID", Short: "Revoke a sign-up invite (its link stops working)",
		Args: cobra.ExactArgs(1), JSON: true, Method: http.MethodDelete,
		Path: func(x *call) string { return signupInvitesPath + "/" + seg(x.args[0]) },
		Print: func(x *call, r *api.SignupInviteResponse) error {
			return x.printf("Sign-up invite %s revoked.\n", r.SignupInvite.ID)
		},
	})
}
