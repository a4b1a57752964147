package cmd

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/theappliance/appliance/api"
)

var _ = registerClientGroup("api-keys", []string{"api-key", "keys"}, "List, create and revoke the organization's API keys",
	newAPIKeysListCmd, newAPIKeysCreateCmd, newAPIKeysRevokeCmd)

// orgFor returns --org, or the organization of the credential (GET /v1/me).
func orgFor(ctx context.Context, cl *apiClient, org string) (string, error) {
	if org != "" {
		return org, nil
	}
	var me api.MeResponse
	if err := cl.do(ctx, http.MethodGet, "/v1/me", nil, &me); err != nil {
		return "", err
	}
	if me.Principal == nil || me.Principal.OrganizationID == "" {
		return "", errors.New("this credential acts in no organization: pass --org ID")
	}
	return me.Principal.OrganizationID, nil
}

// orgFlag adds --org to cmd.
func orgFlag(cmd *cobra.Command, org *string) {
	cmd.Flags().StringVar(org, "org", "", "organization ID (default: the credential's organization)")
}

func keysPath(org string) string { return "/v1/organizations/" + seg(org) + "/api-keys" }

func newAPIKeysListCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[api.APIKeyList]{
		Use: "list", Aliases: []string{"ls"}, Short: "List the organization's API keys (never their secrets)", Org: true,
		Path:    func(x *call) string { return keysPath(x.org) },
		Columns: []string{"ID", "NAME", "PREFIX", "SCOPES", "PROJECT", "ACTIVE", "LAST USED", "EXPIRES"},
		Rows: func(l *api.APIKeyList) [][]string {
			return rowsOf(l.APIKeys, func(k api.APIKey) []string {
				active := "yes"
				switch {
				case k.RevokedAt != nil:
					active = "revoked"
				case !k.IsActive:
					active = "expired"
				}
				return []string{k.ID, k.Name, k.KeyPrefix, scopeList(k.Scopes), firstNonEmpty(k.ProjectID, "-"), active,
					timeOr(k.LastUsedAt, "never"), timeOr(k.ExpiresAt, "never")}
			})
		},
	})
}

// scopeList joins scopes with commas, or says "all" for a key holding every scope.
func scopeList(scopes []string) string {
	all := len(scopes) == len(api.AllScopes)
	for _, sc := range api.AllScopes {
		all = all && slices.Contains(scopes, string(sc))
	}
	if all {
		return "all"
	}
	return strings.Join(scopes, ",")
}

func newAPIKeysCreateCmd(o *clientOpts) *cobra.Command {
	var (
		name, project string
		scopes, ss    []string
		days          int64
	)
	return newAPICmd(o, apiCmd[api.CreatedAPIKey]{
		Use:   "create",
		Short: "Create an API key; its secret is printed once",
		Long: `Create an API key. The secret is printed once, alone on standard output (the details and a warning
go to standard error), so that KEY=$(appliance api-keys create ...) works. It cannot be shown again.`,
		Example: `  appliance api-keys create --name ci --scope projects:read --scope jobs:read
  appliance api-keys create --name deploy --scope projects:read,projects:write --project prj_... --expires-in-days 30`,
		Flags: func(f *pflag.FlagSet) {
			f.StringVar(&name, "name", "", "display name of the key (required)")
			f.StringSliceVar(&scopes, "scope", nil, "scope to grant; repeat or separate with commas (required), e.g. projects:read,jobs:read")
			f.StringVar(&project, "project", "", "restrict the key to this project ID")
			f.Int64Var(&days, "expires-in-days", 0, "days until the key expires (default: never)")
		},
		Validate: func(*call) error {
			if strings.TrimSpace(name) == "" {
				return errors.New("--name is required")
			}
			ss = nil
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
			return nil
		},
		Org: true, Method: http.MethodPost,
		Path: func(x *call) string { return keysPath(x.org) },
		Body: func(*call) any {
			return api.CreateAPIKeyRequest{Name: name, Scopes: ss, ProjectID: project, ExpiresIn: days}
		},
		Print: func(x *call, r *api.CreatedAPIKey) error {
			k, errw := r.APIKey, x.c.ErrOrStderr()
			fmt.Fprintf(errw, "Created API key %s (%s) in organization %s\n  scopes:  %s\n", k.ID, k.Name, k.OrganizationID, strings.Join(k.Scopes, ", "))
			if k.ProjectID != "" {
				fmt.Fprintf(errw, "  project: %s\n", k.ProjectID)
			}
			fmt.Fprintf(errw, "  expires: %s\n", timeOr(k.ExpiresAt, "never"))
			fmt.Fprintln(errw, "Warning: this is the only time the key is shown. Store it now in a secret manager; it cannot be retrieved again.")
			fmt.Fprintln(x.out(), r.PlaintextAPIKey)
			return nil
		},
	})
}

func newAPIKeysRevokeCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[api.Revoked]{
		Use: "revoke KEY_ID", Short: "Revoke an API key at once", Args: cobra.ExactArgs(1), Org: true, Method: http.MethodDelete,
		Path: func(x *call) string { return keysPath(x.org) + "/" + seg(x.args[0]) },
		Print: func(x *call, r *api.Revoked) error {
			if r.Revoked {
				x.printf("Revoked API key %s.\n", x.args[0])
			} else {
				x.printf("API key %s was already revoked.\n", x.args[0])
			}
			return nil
		},
	})
}
