package cmd

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/theappliance/appliance/api"
)

var _ = registerClientCommand(newWhoamiCmd)

func newWhoamiCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[api.MeResponse]{
		Use: "whoami", Short: "Show the credential the CLI uses: its organization, user and scopes", JSON: true,
		Path: func(*call) string { return "/v1/me" },
		Print: func(x *call, me *api.MeResponse) error {
			p := cmp.Or(me.Principal, &api.Principal{})
			src := p.AuthSource
			if p.APIKeyID != "" {
				src += " (" + p.APIKeyID + ")"
			}
			org := "(none: platform administrator)"
			switch {
			case me.Organization != nil:
				org = fmt.Sprintf("%s (%s)", me.Organization.Name, me.Organization.ID)
			case p.OrganizationID != "":
				org = p.OrganizationID
			}
			admin, project := "", ""
			if p.IsAdmin {
				admin = "yes"
			}
			if p.ProjectID != "" {
				project = p.ProjectID + " (this key is restricted to it)"
			}
			return printFields(x.out(), "%-16s%s\n", [][]string{{"API:", x.cl.base}, {"Auth source:", src}, {"Organization:", org},
				{"User:", firstNonEmpty(p.UserID, "-")}, opt("Role:", p.IDPOrganizationRole), opt("Platform admin:", admin),
				{"Scopes:", firstNonEmpty(strings.Join(p.Scopes, ", "), "(none)")}, opt("Project:", project)})
		},
	})
}
