package cmd

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/theappliance/appliance/appliance"
)

// apiKey is the API resource of a key.
type apiKey = appliance.APIKey

var _ = registerClientCommand(newAPIKeysCmd)

func newAPIKeysCmd(o *clientOpts) *cobra.Command {
	return groupCmd("api-keys", []string{"api-key", "keys"}, "List, create and revoke the organization's API keys",
		newAPIKeysListCmd(o), newAPIKeysCreateCmd(o), newAPIKeysRevokeCmd(o))
}

// orgFor returns --org, or the organization of the credential (GET /v1/me).
func orgFor(ctx context.Context, cl *apiClient, org string) (string, error) {
	if org != "" {
		return org, nil
	}
	me, err := cl.me(ctx)
	if err != nil {
		return "", err
	}
	if me.Principal.OrganizationID == "" {
		return "", errors.New("this credential acts in no organization: pass --org ID")
	}
	return me.Principal.OrganizationID, nil
}

// orgFlag adds --org to cmd.
func orgFlag(cmd *cobra.Command, org *string) {
	cmd.Flags().StringVar(org, "org", "", "organization ID (default: the credential's organization)")
}

// orgClient is the authenticated client and the organization a command acts in (--org or the credential's).
func orgClient(c *cobra.Command, o *clientOpts, org string) (*apiClient, string, error) {
	cl, err := o.authed()
	if err != nil {
		return nil, "", err
	}
	orgID, err := orgFor(c.Context(), cl, org)
	return cl, orgID, err
}

func keysPath(org string) string { return "/v1/organizations/" + seg(org) + "/api-keys" }

func newAPIKeysListCmd(o *clientOpts) *cobra.Command {
	var org string
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the organization's API keys (never their secrets)",
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			cl, orgID, err := orgClient(c, o, org)
			if err != nil {
				return err
			}
			var list appliance.APIKeyList
			if err := cl.do(c.Context(), http.MethodGet, keysPath(orgID), nil, &list); err != nil {
				return err
			}
			tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tPREFIX\tSCOPES\tPROJECT\tACTIVE\tLAST USED\tEXPIRES")
			for _, k := range list.APIKeys {
				active := "yes"
				switch {
				case k.RevokedAt != nil:
					active = "revoked"
				case !k.IsActive:
					active = "expired"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Name, k.KeyPrefix, scopeList(k.Scopes),
					firstNonEmpty(k.ProjectID, "-"), active, timeOr(k.LastUsedAt, "never"), timeOr(k.ExpiresAt, "never"))
			}
			return tw.Flush()
		},
	}
	orgFlag(cmd, &org)
	return cmd
}

// scopeList joins scopes with commas, or says "all" for a key holding every scope.
func scopeList(scopes []string) string {
	all := len(scopes) == len(appliance.AllScopes)
	for _, sc := range appliance.AllScopes {
		all = all && slices.Contains(scopes, string(sc))
	}
	if all {
		return "all"
	}
	return strings.Join(scopes, ",")
}

func timeOr(t *time.Time, def string) string {
	if t == nil {
		return def
	}
	return t.UTC().Format(time.RFC3339)
}

func newAPIKeysCreateCmd(o *clientOpts) *cobra.Command {
	var (
		org, name, project string
		scopes             []string
		days               int64
	)
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create an API key; its secret is printed once",
		Long: `Create an API key. The secret is printed once, alone on standard output (the details and a warning
go to standard error), so that KEY=$(appliance api-keys create ...) works. It cannot be shown again.`,
		Example: `  appliance api-keys create --name ci --scope projects:read --scope jobs:read
  appliance api-keys create --name deploy --scope projects:read,projects:write --project prj_... --expires-in-days 30`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if strings.TrimSpace(name) == "" {
				return errors.New("--name is required")
			}
			var ss []string
			for _, s := range scopes {
				if s = strings.TrimSpace(s); s != "" {
					ss = append(ss, s)
				}
			}
			if len(ss) == 0 {
				return errors.New("at least one --scope is required (e.g. --scope projects:read)")
			}
			if days < 0 {
				return errors.New("--expires-in-days must be positive (or 0 for no expiry)")
			}
			cl, orgID, err := orgClient(c, o, org)
			if err != nil {
				return err
			}
			body := map[string]any{"name": name, "scopes": ss}
			if project != "" {
				body["project_id"] = project
			}
			if days > 0 {
				body["expires_in_days"] = days
			}
			var created struct {
				APIKey          apiKey `json:"api_key"`
				PlaintextAPIKey string `json:"plaintext_api_key"`
			}
			if err := cl.do(c.Context(), http.MethodPost, keysPath(orgID), body, &created); err != nil {
				return err
			}
			k, errw := created.APIKey, c.ErrOrStderr()
			fmt.Fprintf(errw, "Created API key %s (%s) in organization %s\n  scopes:  %s\n", k.ID, k.Name, k.OrganizationID, strings.Join(k.Scopes, ", "))
			if k.ProjectID != "" {
				fmt.Fprintf(errw, "  project: %s\n", k.ProjectID)
			}
			fmt.Fprintf(errw, "  expires: %s\n", timeOr(k.ExpiresAt, "never"))
			fmt.Fprintln(errw, "Warning: this is the only time the key is shown. Store it now in a secret manager; it cannot be retrieved again.")
			fmt.Fprintln(c.OutOrStdout(), created.PlaintextAPIKey)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&name, "name", "", "display name of the key (required)")
	f.StringSliceVar(&scopes, "scope", nil, "scope to grant; repeat or separate with commas (required), e.g. projects:read,jobs:read")
	f.StringVar(&project, "project", "", "restrict the key to this project ID")
	f.Int64Var(&days, "expires-in-days", 0, "days until the key expires (default: never)")
	orgFlag(cmd, &org)
	return cmd
}

func newAPIKeysRevokeCmd(o *clientOpts) *cobra.Command {
	var org string
	cmd := &cobra.Command{
		Use:   "revoke KEY_ID",
		Short: "Revoke an API key at once",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cl, orgID, err := orgClient(c, o, org)
			if err != nil {
				return err
			}
			var res appliance.Revoked
			if err := cl.do(c.Context(), http.MethodDelete, keysPath(orgID)+"/"+seg(args[0]), nil, &res); err != nil {
				return err
			}
			if res.Revoked {
				fmt.Fprintf(c.OutOrStdout(), "Revoked API key %s.\n", args[0])
			} else {
				fmt.Fprintf(c.OutOrStdout(), "API key %s was already revoked.\n", args[0])
			}
			return nil
		},
	}
	orgFlag(cmd, &org)
	return cmd
}
