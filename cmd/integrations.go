package cmd

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/theappliance/appliance/api"
)

var _ = registerClientGroup("integrations", []string{"integration"}, "Connect a project to hosting platforms and identity providers",
	newIntegrationsListCmd, newIntegrationsConnectCmd, newIntegrationsDisconnectCmd)

func integrationsPath(projectID string) string { return projectPath(projectID) + "/integrations" }

func newIntegrationsListCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[api.IntegrationList]{
		Use: "list PROJECT_ID", Short: "List the project's integrations (credentials are never shown)", Args: cobra.ExactArgs(1), JSON: true,
		Aliases: []string{"ls"},
		Path:    func(x *call) string { return integrationsPath(x.args[0]) },
		Columns: []string{"PROVIDER", "STATE", "EXTERNAL ID", "CREDENTIALS", "LAST SYNC", "PUSHED", "PREVIEWS", "LAST ERROR"},
		Rows: func(res *api.IntegrationList) [][]string {
			return rowsOf(res.Integrations, func(i *api.Integration) []string {
				creds := "none"
				if i.HasCredentials {
					creds = "stored"
				}
				var prv []string
				for _, p := range i.Previews {
					prv = append(prv, p.Branch+"→"+p.PreviewID)
				}
				return []string{i.Provider, i.State, i.ExternalID, creds, timeOr(i.LastSyncAt, "never"), strings.Join(i.Pushed, ","),
					strings.Join(prv, ","), i.LastError}
			})
		},
	})
}

func newIntegrationsConnectCmd(o *clientOpts) *cobra.Command {
	token := &envFlag{name: "token", env: "APPLIANCE_INTEGRATION_TOKEN",
		usage: "the provider's API token or secret key (APPLIANCE_INTEGRATION_TOKEN; deploy_a may omit it after the dashboard's OAuth)"}
	var externalID, teamID, webhookSecret, config string
	return newAPICmd(o, apiCmd[api.IntegrationJobResponse]{
		Use:   "connect PROJECT_ID PROVIDER",
		Short: "Connect the project to a provider: the credential is stored sealed, checked, and the connection settings pushed (or the users synced)",
		Long: `Connect the project to a provider (` + strings.Join(api.IntegrationProviders, ", ") + `).
--external-id names the provider's resource: deploy_a's project, deploy_b's site, edge_c's account,
auth_b's tenant domain, auth_c's directory. --webhook-secret is the secret the provider signs its
webhooks with (deployment events make preview databases; user events update the users table); give the
provider the URL <api>/v1/integrations/PROVIDER/webhook/PROJECT_ID.`,
		Example: `  APPLIANCE_INTEGRATION_TOKEN=... appliance integrations connect prj_... deploy_a --external-id prj_web --webhook-secret ... --wait
  appliance integrations connect prj_... auth_a --token sk_live_... --config '{"schema":"auth_sync","table":"users"}'`,
		Args: cobra.ExactArgs(2), JSON: true, Wait: "wait until the first sync ends",
		Flags: func(f *pflag.FlagSet) {
			token.bind(f)
			f.StringVar(&externalID, "external-id", "", "the provider's resource (deploy_a project, deploy_b site, edge_c account, auth_b tenant, auth_c directory)")
			f.StringVar(&teamID, "team-id", "", "deploy_a's team (teamId), if the project is a team's")
			f.StringVar(&webhookSecret, "webhook-secret", "", "the secret the provider signs its webhooks with")
			f.StringVar(&config, "config", "", "the provider's config as JSON (default: the stored or default one)")
		},
		Validate: func(x *call) error {
			if !slices.Contains(api.IntegrationProviders, x.args[1]) {
				return fmt.Errorf("provider must be one of %s", strings.Join(api.IntegrationProviders, ", "))
			}
			if config != "" && !json.Valid([]byte(config)) {
				return fmt.Errorf("--config is not JSON")
			}
			return token.resolve(x)
		},
		Fetch: func(x *call, res *api.IntegrationJobResponse) ([]byte, error) {
			name, base := x.args[1], integrationsPath(x.args[0])
			var cfg json.RawMessage
			if config != "" {
				cfg = json.RawMessage(config)
			}
			method, path := http.MethodPost, base+"/"+url.PathEscape(name)+"/connect"
			var body any
			switch name {
			case "deploy_a":
				body = api.ConnectDeployARequest{DeployAProjectID: externalID, Token: token.value, TeamID: teamID, WebhookSecret: webhookSecret, Config: cfg}
			case "deploy_b":
				body = api.ConnectDeployBRequest{SiteID: externalID, Token: token.value, WebhookSecret: webhookSecret, Config: cfg}
			case "edge_c":
				body = api.ConnectEdgeCRequest{AccountID: externalID, APIToken: token.value, Config: cfg}
			case "auth_a":
				body = api.ConnectAuthARequest{SecretKey: token.value, WebhookSecret: webhookSecret, Config: cfg}
			default: // auth_b, auth_c: PUT with credentials
				method, path = http.MethodPut, base+"/"+url.PathEscape(name)
				body = api.PutIntegrationRequest{Config: cfg, Credentials: &api.IntegrationCredentials{Token: token.value, ExternalID: externalID,
					WebhookSecret: webhookSecret, TeamID: teamID}}
			}
			raw, err := x.cl.doRaw(x.c.Context(), method, path, body)
			if err != nil {
				return nil, err
			}
			return raw, json.Unmarshal(raw, res)
		},
		Need: func(r *api.IntegrationJobResponse) string { return missing(r.Integration == nil, "integration") },
		Print: func(x *call, res *api.IntegrationJobResponse) error {
			if !x.json {
				if err := x.printf("Connecting %s to %s (state %s).\n", x.args[0], res.Integration.Provider, res.Integration.State); err != nil {
					return err
				}
			}
			if res.Job == nil || !x.wait {
				return nil
			}
			if _, err := waitJob(x.c, x.cl, res.Job); err != nil {
				return err
			}
			return nil
		},
	})
}

func newIntegrationsDisconnectCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[api.IntegrationDeletedResponse]{
		Use:     "disconnect PROJECT_ID PROVIDER",
		Short:   "Disconnect: remove what the integration pushed at the provider, then forget it and its credentials",
		Example: `  appliance integrations disconnect prj_... deploy_a --confirm --wait`,
		Args:    cobra.ExactArgs(2), JSON: true, Wait: "wait until what was pushed is removed",
		Confirm: "yes, remove the variables the integration set at the provider and its stored credentials",
		Unconfirmed: "this removes the variables the integration set at the provider (its deployments lose DATABASE_URL) " +
			"and the stored credentials: add --confirm",
		Method: http.MethodDelete,
		Path:   func(x *call) string { return integrationsPath(x.args[0]) + "/" + url.PathEscape(x.args[1]) },
		Print: func(x *call, res *api.IntegrationDeletedResponse) error {
			if !x.json {
				if err := x.printf("Disconnected %s from %s.\n", x.args[0], x.args[1]); err != nil {
					return err
				}
			}
			if res.Job == nil || !x.wait {
				return nil
			}
			job, err := waitJob(x.c, x.cl, res.Job)
			if err == nil && !x.json && job != nil && len(job.Result) > 0 {
				return x.printf("%s\n", job.Result)
			}
			return err
		},
	})
}
