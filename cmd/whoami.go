package cmd

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

var _ = registerClientCommand(newWhoamiCmd)

func newWhoamiCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[meResponse]{
		Use: "whoami", Short: "Show the credential the CLI uses: its organization, user and scopes", JSON: true,
		Path: func(*call) string { return "/v1/me" },
		Print: func(x *call, me *meResponse) error {
			p := me.Principal
			rows := [][2]string{{"API:", x.cl.base}}
			src := p.AuthSource
			if p.APIKeyID != "" {
				src += " (" + p.APIKeyID + ")"
			}
			rows = append(rows, [2]string{"Auth source:", src})
			switch {
			case me.Organization != nil:
				rows = append(rows, [2]string{"Organization:", fmt.Sprintf("%s (%s)", me.Organization.Name, me.Organization.ID)})
			case p.OrganizationID != "":
				rows = append(rows, [2]string{"Organization:", p.OrganizationID})
			default:
				rows = append(rows, [2]string{"Organization:", "(none: platform administrator)"})
			}
			rows = append(rows, [2]string{"User:", firstNonEmpty(p.UserID, "-")})
			if p.IDPOrganizationRole != "" {
				rows = append(rows, [2]string{"Role:", p.IDPOrganizationRole})
			}
			if p.IsAdmin {
				rows = append(rows, [2]string{"Platform admin:", "yes"})
			}
			rows = append(rows, [2]string{"Scopes:", firstNonEmpty(strings.Join(p.Scopes, ", "), "(none)")})
			if p.ProjectID != "" {
				rows = append(rows, [2]string{"Project:", p.ProjectID + " (this key is restricted to it)"})
			}
			for _, r := range rows {
				x.printf("%-16s%s\n", r[0], r[1])
			}
			return nil
		},
	})
}
