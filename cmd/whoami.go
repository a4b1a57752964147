package cmd

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/spf13/cobra"
)

var _ = registerClientCommand(newWhoamiCmd)

func newWhoamiCmd(o *clientOpts) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "whoami",
		Short: "Show the credential the CLI uses: its organization, user and scopes",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			cn, err := o.resolve()
			if err != nil {
				return err
			}
			cl, err := cn.client()
			if err != nil {
				return err
			}
			raw, err := cl.doRaw(c.Context(), http.MethodGet, "/v1/me", nil)
			if err != nil {
				return err
			}
			out := c.OutOrStdout()
			if asJSON {
				return printJSON(out, raw)
			}
			var me meResponse
			if err := decode(http.MethodGet, "/v1/me", raw, &me); err != nil {
				return err
			}
			p := me.Principal
			rows := [][2]string{{"API:", cn.apiURL}}
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
				fmt.Fprintf(out, "%-16s%s\n", r[0], r[1])
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the API's JSON answer")
	return cmd
}
